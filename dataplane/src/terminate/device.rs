//! The smoltcp device of a shard: one received IP packet in, the packets smoltcp writes
//! out into fresh buffers of the worker's pool (with room for the Ethernet header the
//! forwarder fills in).

use crate::pipeline::stage::StageIo;
use crate::port::Pkt;
use smoltcp::phy::{Device, DeviceCapabilities, Medium, RxToken, TxToken};
use smoltcp::time::Instant;

/// Room left before the IP packet for the Ethernet header.
pub(super) const L2: usize = 14;

/// The device for one poll of a shard.
pub(super) struct Wire<'a> {
    /// The packet to deliver (its IP header on), taken by the first receive.
    pub(super) rx: Option<&'a [u8]>,
    /// The worker's buffers (`None`: nothing can be sent).
    pub(super) io: Option<&'a StageIo>,
    /// What smoltcp sent, IP packets at offset [`L2`].
    pub(super) out: &'a mut Vec<Pkt>,
    /// Packets `out` may take in this poll.
    pub(super) room: usize,
    /// Packets smoltcp wrote that no buffer was free for (lost like a full tx queue:
    /// smoltcp retransmits).
    pub(super) lost: &'a mut u64,
    /// IP MTU.
    pub(super) mtu: usize,
}

/// A received packet.
pub(super) struct Rx<'a>(&'a [u8]);

impl RxToken for Rx<'_> {
    fn consume<R, F>(self, f: F) -> R
    where
        F: FnOnce(&[u8]) -> R,
    {
        f(self.0)
    }
}

/// A packet to send.
pub(super) struct Tx<'a> {
    io: Option<&'a StageIo>,
    out: &'a mut Vec<Pkt>,
    lost: &'a mut u64,
}

impl TxToken for Tx<'_> {
    fn consume<R, F>(self, len: usize, f: F) -> R
    where
        F: FnOnce(&mut [u8]) -> R,
    {
        if let Some(mut p) = self.io.and_then(StageIo::alloc) {
            if p.set_len(L2 + len) {
                let r = f(&mut p.data_mut()[L2..]);
                self.out.push(p);
                return r;
            }
        }
        // No buffer: the closure still runs (smoltcp's state moves on as if sent) and the
        // packet is lost on the wire, which TCP recovers from.
        *self.lost += 1;
        let mut scratch = [0u8; 2048];
        let n = len.min(scratch.len());
        f(&mut scratch[..n])
    }
}

impl Device for Wire<'_> {
    type RxToken<'b>
        = Rx<'b>
    where
        Self: 'b;
    type TxToken<'b>
        = Tx<'b>
    where
        Self: 'b;

    fn receive(&mut self, _: Instant) -> Option<(Rx<'_>, Tx<'_>)> {
        let bytes = self.rx.take()?;
        Some((
            Rx(bytes),
            Tx {
                io: self.io,
                out: self.out,
                lost: self.lost,
            },
        ))
    }

    fn transmit(&mut self, _: Instant) -> Option<Tx<'_>> {
        if self.out.len() >= self.room {
            return None;
        }
        Some(Tx {
            io: self.io,
            out: self.out,
            lost: self.lost,
        })
    }

    fn capabilities(&self) -> DeviceCapabilities {
        let mut caps = DeviceCapabilities::default();
        caps.medium = Medium::Ip;
        caps.max_transmission_unit = self.mtu;
        caps
    }
}
