//! Keyed SYN cookies: the initial sequence number sluice answers a SYN with, from which
//! the client's third segment proves the handshake and brings back the SYN's options, so
//! a SYN flood leaves no state.
//!
//! Layout of the 32-bit cookie (most significant bit first):
//!
//! ```text
//!  31                            8   7    6 5   4     1   0
//! +-------------------------------+-----+-----+---------+----+
//! |   MAC (24 bits of SipHash)    | ep  | mss |  wscale | sp |
//! +-------------------------------+-----+-----+---------+----+
//! ```
//!
//! - `ep`: the parity of the secret's epoch. Secrets rotate every [`ROTATION_S`] seconds;
//!   a cookie is accepted under the current epoch's secret or the previous one's, so it
//!   lives between one and two rotations.
//! - `mss`: index into [`MSS_TABLE`] (the largest entry not above the client's MSS).
//! - `wscale`: the client's window scale (0–14), or 15 when it offered none.
//! - `sp`: the client offered SACK.
//!
//! The MAC is SipHash-2-4 under the epoch's key over both addresses, both ports, the
//! client's initial sequence number and the low 8 bits. The epoch keys are derived from
//! one 128-bit master secret (`key(e) = SipHash(master, e)` twice), so workers that share
//! the master accept each other's cookies and nothing needs a random source on the hot
//! path. A forged ACK passes with probability 2^-23 (24 bits, two epochs), the strength of
//! Linux's cookies. Timestamps are not used: sluice does not offer them (see the
//! [module docs](super)).

use siphasher::sip::SipHasher24;
use std::hash::Hasher;

/// Seconds between secret rotations.
pub const ROTATION_S: u64 = 64;

/// MSS values a cookie can carry (RFC 879's 536, IPv6 tunnels, common Ethernet).
pub const MSS_TABLE: [u16; 4] = [536, 1220, 1440, 1460];

/// What a SYN asked for, as a cookie carries it back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SynOptions {
    /// Maximum segment size (rounded down to a [`MSS_TABLE`] entry).
    pub mss: u16,
    /// Window scale, if the client offered one.
    pub wscale: Option<u8>,
    /// The client offered SACK.
    pub sack: bool,
}

/// The cookie secret of a worker (or of all: workers built from one master agree).
#[derive(Clone)]
pub struct Cookies {
    master: (u64, u64),
}

impl std::fmt::Debug for Cookies {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Cookies { .. }") // never print the secret
    }
}

impl Cookies {
    /// Cookies keyed by a 128-bit master secret (read it from the OS at start).
    pub fn new(master: [u8; 16]) -> Cookies {
        let (a, b) = master.split_at(8);
        Cookies {
            master: (
                u64::from_le_bytes(a.try_into().unwrap_or([0; 8])),
                u64::from_le_bytes(b.try_into().unwrap_or([0; 8])),
            ),
        }
    }

    fn key(&self, epoch: u64) -> (u64, u64) {
        let h = |salt: u64| {
            let mut s = SipHasher24::new_with_keys(self.master.0, self.master.1);
            s.write_u64(epoch);
            s.write_u64(salt);
            s.finish()
        };
        (h(1), h(2))
    }

    fn mac(&self, epoch: u64, tuple: &[u8; 36], client_isn: u32, low: u8) -> u32 {
        let (k0, k1) = self.key(epoch);
        let mut s = SipHasher24::new_with_keys(k0, k1);
        s.write(tuple);
        s.write_u32(client_isn);
        s.write_u8(low);
        (s.finish() >> 40) as u32 // 24 bits
    }

    /// The cookie for a SYN with `client_isn` and `opts` on `tuple` (see [`tuple_bytes`]),
    /// at `now_s` seconds.
    pub fn make(&self, tuple: &[u8; 36], client_isn: u32, opts: SynOptions, now_s: u64) -> u32 {
        let epoch = now_s / ROTATION_S;
        let mss = MSS_TABLE.iter().rposition(|&m| m <= opts.mss).unwrap_or(0) as u8;
        let ws = opts.wscale.map_or(15, |w| w.min(14));
        let low = ((epoch as u8 & 1) << 7) | (mss << 5) | (ws << 1) | u8::from(opts.sack);
        (self.mac(epoch, tuple, client_isn, low) << 8) | u32::from(low)
    }

    /// Checks `cookie` (the acknowledgment number minus one) for the handshake of
    /// `client_isn` (the sequence number minus one) on `tuple` at `now_s`: the SYN's
    /// options, or `None` for a forged, stale or foreign cookie.
    pub fn check(
        &self,
        tuple: &[u8; 36],
        client_isn: u32,
        cookie: u32,
        now_s: u64,
    ) -> Option<SynOptions> {
        let low = cookie as u8;
        let now_epoch = now_s / ROTATION_S;
        let epoch = if u64::from(low >> 7) == now_epoch & 1 {
            now_epoch
        } else {
            now_epoch.checked_sub(1)?
        };
        if self.mac(epoch, tuple, client_isn, low) != cookie >> 8 {
            return None;
        }
        let ws = (low >> 1) & 0x0f;
        Some(SynOptions {
            mss: MSS_TABLE[usize::from((low >> 5) & 3)],
            wscale: (ws != 15).then_some(ws),
            sack: low & 1 != 0,
        })
    }
}

/// The bytes a cookie is bound to: source address, destination address (16 bytes each,
/// IPv4-mapped for IPv4), source port, destination port.
pub fn tuple_bytes(src: &[u8; 16], dst: &[u8; 16], sport: u16, dport: u16) -> [u8; 36] {
    let mut b = [0u8; 36];
    b[..16].copy_from_slice(src);
    b[16..32].copy_from_slice(dst);
    b[32..34].copy_from_slice(&sport.to_be_bytes());
    b[34..36].copy_from_slice(&dport.to_be_bytes());
    b
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tuple(port: u16) -> [u8; 36] {
        let mut a = [0u8; 16];
        a[10] = 0xff;
        a[11] = 0xff;
        a[12..].copy_from_slice(&[10, 0, 0, 1]);
        let mut b = a;
        b[15] = 2;
        tuple_bytes(&a, &b, port, 443)
    }

    const OPTS: SynOptions = SynOptions {
        mss: 1460,
        wscale: Some(7),
        sack: true,
    };

    #[test]
    fn a_cookie_brings_back_the_options() {
        let c = Cookies::new([7; 16]);
        let t = tuple(40000);
        for (opts, back_mss) in [
            (OPTS, 1460),
            (
                SynOptions {
                    mss: 1400,
                    wscale: None,
                    sack: false,
                },
                1220,
            ),
            (
                SynOptions {
                    mss: 100,
                    wscale: Some(14),
                    sack: true,
                },
                536,
            ),
            (
                SynOptions {
                    mss: 9000,
                    wscale: Some(0),
                    sack: false,
                },
                1460,
            ),
        ] {
            let k = c.make(&t, 12345, opts, 1000);
            let back = c.check(&t, 12345, k, 1000).expect("valid");
            assert_eq!(back.mss, back_mss);
            assert_eq!(back.wscale, opts.wscale);
            assert_eq!(back.sack, opts.sack);
        }
    }

    #[test]
    fn cookies_live_one_to_two_rotations() {
        let c = Cookies::new([9; 16]);
        let t = tuple(1);
        let made = 10 * ROTATION_S + 5;
        let k = c.make(&t, 1, OPTS, made);
        assert!(c.check(&t, 1, k, made).is_some());
        assert!(c.check(&t, 1, k, 11 * ROTATION_S + 63).is_some());
        assert!(c.check(&t, 1, k, 12 * ROTATION_S).is_none());
        // Made in an epoch of the other parity long ago: rejected, not mistaken.
        assert!(c.check(&t, 1, k, 13 * ROTATION_S).is_none());
    }

    #[test]
    fn forged_and_foreign_cookies_fail() {
        let c = Cookies::new([1; 16]);
        let other = Cookies::new([2; 16]);
        let t = tuple(5);
        let k = c.make(&t, 77, OPTS, 0);
        assert!(c.check(&t, 78, k, 0).is_none(), "other ISN");
        assert!(c.check(&tuple(6), 77, k, 0).is_none(), "other port");
        assert!(other.check(&t, 77, k, 0).is_none(), "other secret");
        for bit in 0..32 {
            assert!(c.check(&t, 77, k ^ (1 << bit), 0).is_none(), "bit {bit}");
        }
        // Random guesses: about 2^-23 pass; none of 100k should.
        let mut x = 0x1234_5678u32;
        let mut passed = 0;
        for _ in 0..100_000 {
            x = x.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
            passed += usize::from(c.check(&t, 77, x, 0).is_some());
        }
        assert!(passed <= 1, "{passed}");
    }

    #[test]
    fn distinct_tuples_get_distinct_cookies() {
        let c = Cookies::new([3; 16]);
        let mut seen = std::collections::HashSet::new();
        for p in 1..2000u16 {
            seen.insert(c.make(&tuple(p), 5, OPTS, 0) >> 8);
        }
        assert!(seen.len() > 1990, "{}", seen.len());
    }
}
