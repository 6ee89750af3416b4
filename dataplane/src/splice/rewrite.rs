//! The per-packet rewrite of a spliced flow: sequence space, SACK edges and window scale
//! (see the [module docs](super)), with the TCP checksum updated incrementally.

use super::options;
use crate::flow::{Dir, Splice, TcpFlags};
use crate::pipeline::nat::fold_not;
use crate::pipeline::parse::Meta;
use crate::port::Pkt;
use crate::wire::{checksum, tcp};

const ACK: u8 = TcpFlags::ACK;

/// A window field scaled by `from` re-expressed at scale `to`: rounded down, but never to
/// zero from a non-zero window (that would stall the sender), at most 65535.
#[inline]
pub fn rescale(win: u16, from: u8, to: u8) -> u16 {
    if from == to {
        return win;
    }
    let bytes = u64::from(win) << from;
    let v = bytes >> to;
    let v = if v == 0 && bytes > 0 { 1 } else { v };
    v.min(0xffff) as u16
}

/// Rewrites a spliced segment's sequence space (see [`crate::splice`]): `Reply`
/// (backend -> client) `seq += delta` and the window from the backend's scale to sluice's;
/// `Orig` `ack -= delta`, SACK edges `-= delta`, and the window scaled up when the backend
/// declined scaling. The TCP checksum is updated incrementally.
#[inline]
pub fn splice_rewrite(pkt: &mut Pkt, meta: &Meta, dir: Dir, s: Splice) {
    let d = pkt.data_mut();
    let seg = &mut d[meta.l4..];
    let word = |v: u32| u64::from(v >> 16) + u64::from(v & 0xffff);
    let get = |b: &[u8], i: usize| u32::from_be_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]);
    let (mut old, mut new) = (0u64, 0u64);
    let win = u16::from_be_bytes([seg[14], seg[15]]);
    let mut odd_sack = false;
    let nwin = match dir {
        Dir::Reply => {
            let seq = get(seg, 4);
            let nseq = seq.wrapping_add(s.value);
            seg[4..8].copy_from_slice(&nseq.to_be_bytes());
            old += word(seq);
            new += word(nseq);
            rescale(win, s.scales >> 4, s.scales & 0x0f)
        }
        Dir::Orig => {
            if meta.flags & ACK != 0 {
                let ack = get(seg, 8);
                let nack = ack.wrapping_sub(s.value);
                seg[8..12].copy_from_slice(&nack.to_be_bytes());
                old += word(ack);
                new += word(nack);
            }
            let hl = (usize::from(seg[12] >> 4) * 4).min(seg.len());
            if hl > tcp::HEADER_LEN {
                match options::shift_sack_edges(&mut seg[tcp::HEADER_LEN..hl], s.value) {
                    Some((o, n)) => {
                        old += o;
                        new += n;
                    }
                    None => odd_sack = true,
                }
            }
            let fix = s.phase >> 4;
            if fix == 0 {
                win
            } else {
                rescale(win, fix, 0)
            }
        }
    };
    if nwin != win {
        seg[14..16].copy_from_slice(&nwin.to_be_bytes());
        old += u64::from(win);
        new += u64::from(nwin);
    }
    if odd_sack {
        recompute_tcp_checksum(pkt, meta);
        return;
    }
    let c = u16::from_be_bytes([seg[16], seg[17]]);
    let c = !checksum::fold(u64::from(!c) + fold_not(old) + new);
    seg[16..18].copy_from_slice(&c.to_be_bytes());
}

/// Recomputes a TCP checksum from scratch (for the rare layouts the incremental update
/// does not cover).
fn recompute_tcp_checksum(pkt: &mut Pkt, meta: &Meta) {
    let d = pkt.data_mut();
    let hl = usize::from(d[meta.l4 + 12] >> 4) * 4;
    let end = (meta.l4 + hl + meta.payload as usize).min(d.len());
    tcp::Packet::new_unchecked(&mut d[meta.l4..end]).fill_checksum(meta.src(), meta.dst());
}
