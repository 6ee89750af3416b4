//! The TCP options delayed binding reads and writes (RFC 9293 §3.2, RFC 7323, RFC 2018):
//! MSS, window scale and SACK-permitted on SYNs, SACK blocks on spliced segments.

/// End of option list.
pub const END: u8 = 0;
/// No-operation (padding).
pub const NOP: u8 = 1;
/// Maximum segment size (kind, len 4, u16).
pub const MSS: u8 = 2;
/// Window scale (kind, len 3, shift).
pub const WSCALE: u8 = 3;
/// SACK permitted (kind, len 2).
pub const SACK_PERMITTED: u8 = 4;
/// SACK blocks (kind, len 2 + 8n, n pairs of u32 edges).
pub const SACK: u8 = 5;
/// The largest window shift RFC 7323 allows.
pub const MAX_WSCALE: u8 = 14;

/// The options of a SYN or SYN-ACK that matter here.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SynOpts {
    /// MSS, if present.
    pub mss: Option<u16>,
    /// Window scale (clamped to 14, as RFC 7323 §2.3 says a receiver does), if present.
    pub wscale: Option<u8>,
    /// SACK permitted.
    pub sack: bool,
}

/// Walks the options, calling `f(kind, offset of the option, its body)` for each
/// well-formed one; stops at END or at the first malformed one (a truncated or
/// zero-length option: the rest cannot be read reliably).
pub fn walk(opts: &[u8], mut f: impl FnMut(u8, usize, &[u8])) {
    let mut i = 0;
    while i < opts.len() {
        match opts[i] {
            END => return,
            NOP => i += 1,
            kind => {
                let Some(&len) = opts.get(i + 1) else { return };
                let len = usize::from(len);
                if len < 2 || i + len > opts.len() {
                    return;
                }
                f(kind, i, &opts[i + 2..i + len]);
                i += len;
            }
        }
    }
}

/// Reads MSS, window scale and SACK-permitted.
pub fn parse_syn(opts: &[u8]) -> SynOpts {
    let mut o = SynOpts::default();
    walk(opts, |kind, _, body| match (kind, body.len()) {
        (MSS, 2) => o.mss = Some(u16::from_be_bytes([body[0], body[1]])),
        (WSCALE, 1) => o.wscale = Some(body[0].min(MAX_WSCALE)),
        (SACK_PERMITTED, 0) => o.sack = true,
        _ => {}
    });
    o
}

/// Writes SYN options into `out` (which must hold 20 bytes), padded with NOPs to a
/// multiple of 4: MSS, then SACK-permitted and window scale when asked for. Returns the
/// length written.
pub fn emit_syn(out: &mut [u8], mss: u16, wscale: Option<u8>, sack: bool) -> usize {
    let mut n = 0;
    let mut put = |b: &[u8]| {
        out[n..n + b.len()].copy_from_slice(b);
        n += b.len();
    };
    let m = mss.to_be_bytes();
    put(&[MSS, 4, m[0], m[1]]);
    if sack {
        put(&[NOP, NOP, SACK_PERMITTED, 2]);
    }
    if let Some(ws) = wscale {
        put(&[NOP, WSCALE, 3, ws.min(MAX_WSCALE)]);
    }
    n
}

/// Subtracts `delta` from every SACK block edge in `opts` (a client's SACK blocks name
/// bytes in sluice's sequence space; the backend's space is `delta` lower), in one pass
/// over the options as [`walk`] reads them. Returns the ones' complement sums of the old
/// and new edges, for an incremental checksum update, or `None` when a block starts at an
/// odd offset (a single NOP before SACK, the rare layout): its edges straddle checksum
/// words, so the caller recomputes the checksum (the edges are shifted all the same).
/// Options start at an even offset of the segment.
pub fn shift_sack_edges(opts: &mut [u8], delta: u32) -> Option<(u64, u64)> {
    let (mut old, mut new, mut odd) = (0u64, 0u64, false);
    let mut i = 0;
    while i < opts.len() {
        match opts[i] {
            END => break,
            NOP => i += 1,
            kind => {
                let Some(&len) = opts.get(i + 1) else { break };
                let len = usize::from(len);
                if len < 2 || i + len > opts.len() {
                    break;
                }
                if kind == SACK && (len - 2) % 8 == 0 {
                    odd |= i % 2 == 1;
                    for e in opts[i + 2..i + len].chunks_exact_mut(4) {
                        let v = u32::from_be_bytes([e[0], e[1], e[2], e[3]]);
                        let w = v.wrapping_sub(delta);
                        old += u64::from(v >> 16) + u64::from(v & 0xffff);
                        new += u64::from(w >> 16) + u64::from(w & 0xffff);
                        e.copy_from_slice(&w.to_be_bytes());
                    }
                }
                i += len;
            }
        }
    }
    (!odd).then_some((old, new))
}

/// Whether any SACK block in `opts` starts at an odd offset (see [`shift_sack_edges`]).
pub fn sack_is_odd_aligned(opts: &[u8]) -> bool {
    let mut odd = false;
    walk(opts, |kind, at, _| {
        if kind == SACK && at % 2 == 1 {
            odd = true;
        }
    });
    odd
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn linux_syn_options() {
        // MSS 1460, SACK-permitted, timestamps, NOP, window scale 7 (a Linux SYN).
        let o = [
            2, 4, 0x05, 0xb4, 4, 2, 8, 10, 0, 0, 0, 1, 0, 0, 0, 0, 1, 3, 3, 7,
        ];
        assert_eq!(
            parse_syn(&o),
            SynOpts {
                mss: Some(1460),
                wscale: Some(7),
                sack: true
            }
        );
        assert_eq!(parse_syn(&[]), SynOpts::default());
        // Window scale above 14 is read as 14; a malformed tail stops the walk.
        assert_eq!(parse_syn(&[3, 3, 20, 2, 0]).wscale, Some(14));
        assert_eq!(parse_syn(&[2, 4, 1]).mss, None);
        assert_eq!(parse_syn(&[9, 0, 2, 4, 1, 1]).mss, None);
        assert_eq!(parse_syn(&[0, 2, 4, 1, 1]).mss, None);
    }

    #[test]
    fn emitted_options_parse_back() {
        for (ws, sack) in [
            (None, false),
            (Some(7), true),
            (Some(0), false),
            (Some(14), true),
        ] {
            let mut b = [0u8; 20];
            let n = emit_syn(&mut b, 1400, ws, sack);
            assert_eq!(n % 4, 0);
            assert_eq!(
                parse_syn(&b[..n]),
                SynOpts {
                    mss: Some(1400),
                    wscale: ws,
                    sack
                }
            );
        }
    }

    #[test]
    fn sack_edges_shift_and_sums_match() {
        // NOP NOP SACK(2 blocks).
        let mut o = vec![1, 1, 5, 18];
        for e in [100u32, 200, 5, 0xffff_fff0] {
            o.extend_from_slice(&e.to_be_bytes());
        }
        let before = crate::wire::checksum::data(&o);
        let (old, new) = shift_sack_edges(&mut o, 10).expect("even layout");
        let after = crate::wire::checksum::data(&o);
        let edges: Vec<u32> = o[4..]
            .chunks(4)
            .map(|c| u32::from_be_bytes([c[0], c[1], c[2], c[3]]))
            .collect();
        assert_eq!(edges, vec![90, 190, 0xffff_fffb, 0xffff_ffe6]);
        // Sum of the data = the rest + edges: the change in sums is the change in data.
        let fold = crate::wire::checksum::fold;
        assert_eq!(
            fold(u64::from(after) + u64::from(!fold(new))),
            fold(u64::from(before) + u64::from(!fold(old)))
        );
        assert!(!sack_is_odd_aligned(&o));
        // NOP SACK(1 block) NOP: odd, no sums, edges shifted all the same.
        let mut odd = [1, 5, 10, 0, 0, 0, 20, 0, 0, 0, 30, 1];
        assert!(sack_is_odd_aligned(&odd));
        assert_eq!(shift_sack_edges(&mut odd, 5), None);
        assert_eq!(odd, [1, 5, 10, 0, 0, 0, 15, 0, 0, 0, 25, 1]);
        // A malformed option ends the walk: nothing after it is touched.
        let mut bad = [1, 1, 8, 0, 5, 10, 0, 0, 0, 20, 0, 0, 0, 30];
        assert_eq!(shift_sack_edges(&mut bad, 5), Some((0, 0)));
        assert_eq!(bad[9], 20);
    }
}
