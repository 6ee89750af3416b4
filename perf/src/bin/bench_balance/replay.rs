//! Traffic sources: the replayed ACKs ([`Source`], a capture or a template), the replay
//! queue, the backends' replies and the sink.

use crate::frames::{client, frames, segment, segment_from, shuffled, tcp_frame, Frames};
use crate::world::{BACKEND_MAC, FRAME, INSIDE_MAC, STRIDE};
use clap::ValueEnum;
use sluice_dataplane::port::{Burst, Pool, Queue};
use sluice_dataplane::wire::{ip_proto, tcp};
use std::net::Ipv4Addr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// ACK segments of established flows, in the order they are replayed.
pub(crate) enum Source {
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
    pub(crate) fn acks(n: usize, kind: SourceKind) -> Source {
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

    pub(crate) fn len(&self) -> usize {
        match self {
            Source::Capture(f) => f.len(),
            Source::Template { tuples, .. } => tuples.len(),
        }
    }

    /// Writes frame `k` of a template source into `out` (setup check only).
    pub(crate) fn frame(&self, k: usize, out: &mut [u8; FRAME]) {
        if let Source::Template { frame, tuples } = self {
            *out = *frame;
            stamp(out, tuples[k]);
        }
    }
}

/// Which [`Source`] the flow-count series replays.
#[derive(Clone, Copy, Debug, PartialEq, ValueEnum)]
pub(crate) enum SourceKind {
    Capture,
    Template,
}

impl SourceKind {
    pub(crate) fn name(self) -> &'static str {
        match self {
            SourceKind::Capture => "capture",
            SourceKind::Template => "template",
        }
    }
}

/// One's-complement sum of `x`'s two 16-bit halves added to `sum` (not folded).
#[inline(always)]
pub(crate) fn add32(sum: u32, x: u32) -> u32 {
    sum + (x >> 16) + (x & 0xffff)
}

#[inline(always)]
pub(crate) fn fold(mut s: u32) -> u16 {
    s = (s & 0xffff) + (s >> 16);
    s = (s & 0xffff) + (s >> 16);
    s as u16
}

/// Writes a flow's source address and port (`tuple`, as in [`Source::Template`]) into a
/// copy of the template (whose source is 0.0.0.0:0), adjusting the IPv4 and TCP
/// checksums: adding a field's words to the sum the checksum complements (RFC 1624,
/// eqn. 3, with the old value 0).
#[inline(always)]
pub(crate) fn stamp(d: &mut [u8], tuple: u64) {
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
pub(crate) struct Replay {
    pub(crate) pool: Pool,
    pub(crate) warmup: Option<Arc<Frames>>,
    pub(crate) frames: Arc<Source>,
    pub(crate) pos: usize,
    pub(crate) warm_done: Arc<AtomicBool>,
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
pub(crate) struct Backends {
    pub(crate) pool: Pool,
    pub(crate) flows: usize,
    /// The NATed SYNs' addresses and ports (SNAT address, SNAT port, backend, port).
    pub(crate) seen: Vec<(Ipv4Addr, u16, Ipv4Addr, u16)>,
    pub(crate) replies: Option<Frames>,
    pub(crate) pos: usize,
}

impl Backends {
    /// Replies of `flows` flows, in buffers from `pool` (the client side's: one pool
    /// cycles through fewer cold buffers than two).
    pub(crate) fn new(flows: usize, pool: Pool) -> Backends {
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
pub(crate) struct Sink;

impl Queue for Sink {
    fn rx_burst(&mut self, _: &mut Burst) -> usize {
        0
    }
    fn tx_burst(&mut self, pkts: &mut Burst) -> usize {
        pkts.clear()
    }
}
