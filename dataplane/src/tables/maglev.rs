//! Weighted Maglev backend tables, built to pick the same backend as Envoy.
//!
//! A [`MaglevTable`] maps a flow hash to a slot: a backend address, or a *reject* marker
//! that stands for backends that are invalid (a missing Service, no endpoints): per the
//! Gateway API and seed 004 such a backend keeps its weight and its share of connections
//! is actively rejected.
//!
//! ## Construction (off the hot path)
//!
//! Envoy's `OriginalMaglevTable` (Maglev paper, listing 1, with Envoy's weighted fill):
//! every entry is keyed by a string — a backend's `ip:port` (`[v6]:port` for IPv6), as
//! Envoy's `Address::asString` — and entries are sorted by that key. An entry's offset is
//! `xxh64(key, 0) % M`, its skip `xxh64(key, 1) % (M - 1) + 1`. Weights are normalised to
//! `w / Σw` (an `f64`, one correctly rounded division, as Envoy computes it); in round
//! `i = 1, 2, ...` an entry places its next preferred free slot unless
//! `i * weight < target`, and then raises its `target` by the largest normalised weight.
//! So for the same hosts, weights and table size, sluice and Envoy fill identical tables.
//!
//! Reject entries take part in the fill like any other entry (keyed `reject:<name>`), so
//! their share of slots equals their share of weight. Entries with weight 0 never appear;
//! a total weight of 0 gives a table whose every slot rejects.
//!
//! ## Lookup (hot path)
//!
//! [`MaglevTable::pick`] is one modulo and one load: no allocation, no branch on the
//! number of backends.

use core::fmt;
use std::net::SocketAddr;

use xxhash_rust::xxh64::xxh64;

/// Envoy's default and sluice's default table size (prime).
pub const DEFAULT_TABLE_SIZE: u64 = 65537;

/// The largest table size accepted (prime; 4 bytes a slot: 20 MiB).
pub const MAX_TABLE_SIZE: u64 = 5_000_011;

/// What a table entry stands for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum EntryTarget {
    /// A backend endpoint.
    Backend(SocketAddr),
    /// An invalid backend: slots it owns reject connections. The string names it (it is
    /// the entry's hash key after `reject:`).
    Reject(String),
}

/// One weighted entry of the build input.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    /// Backend or reject marker.
    pub target: EntryTarget,
    /// Relative weight (0 = never placed). Integers keep the normalisation exact.
    pub weight: u64,
}

/// Why a table could not be built.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum BuildError {
    /// The table size is not a prime in `2..=MAX_TABLE_SIZE`.
    TableSize(u64),
    /// More backends than fit in a slot index.
    TooManyBackends(usize),
    /// Weights overflow (their sum exceeds 2^53, past exact `f64` integers).
    WeightOverflow,
}

impl fmt::Display for BuildError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BuildError::TableSize(m) => {
                write!(
                    f,
                    "Maglev table size {m} must be a prime no larger than {MAX_TABLE_SIZE}"
                )
            }
            BuildError::TooManyBackends(n) => write!(f, "{n} backends is more than a table holds"),
            BuildError::WeightOverflow => f.write_str("the sum of weights exceeds 2^53"),
        }
    }
}

impl std::error::Error for BuildError {}

/// The result of a lookup.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Pick {
    /// Forward to this backend.
    Backend(SocketAddr),
    /// The flow falls in an invalid backend's share: reject it (TCP RST, ICMP port
    /// unreachable).
    Reject,
}

/// The hash that picks a flow's Maglev slot: XXH64 (seed 0) of the client-side
/// 5-tuple laid out as `src ip (16 bytes, IPv4 mapped) | dst ip (16) | src port (2, BE) |
/// dst port (2, BE) | protocol (1)`. The dataplane and `sluice explain` both use this, so
/// explain names the backend the dataplane would pick.
pub fn flow_hash(src: SocketAddr, dst: SocketAddr, protocol: u8) -> u64 {
    let mut key = [0u8; 37];
    key[..16].copy_from_slice(&mapped(src.ip()));
    key[16..32].copy_from_slice(&mapped(dst.ip()));
    key[32..34].copy_from_slice(&src.port().to_be_bytes());
    key[34..36].copy_from_slice(&dst.port().to_be_bytes());
    key[36] = protocol;
    xxh64(&key, 0)
}

fn mapped(ip: std::net::IpAddr) -> [u8; 16] {
    match ip {
        std::net::IpAddr::V4(a) => a.to_ipv6_mapped().octets(),
        std::net::IpAddr::V6(a) => a.octets(),
    }
}

/// Slot value for reject entries (slot values are otherwise indices into `backends`).
const REJECT_SLOT: u32 = u32::MAX;

/// A compiled, immutable Maglev table (see the [module docs](self)).
#[derive(Clone, PartialEq, Eq)]
pub struct MaglevTable {
    slots: Box<[u32]>,
    backends: Box<[SocketAddr]>,
}

impl fmt::Debug for MaglevTable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MaglevTable")
            .field("size", &self.slots.len())
            .field("backends", &self.backends)
            .finish()
    }
}

/// Whether `n` is prime (trial division; table sizes are small).
pub fn is_prime(n: u64) -> bool {
    if n < 2 {
        return false;
    }
    let mut d = 2u64;
    while d.saturating_mul(d) <= n {
        if n.is_multiple_of(d) {
            return false;
        }
        d += 1;
    }
    true
}

struct BuildEntry {
    slot_value: u32,
    offset: u64,
    skip: u64,
    weight: f64,
    target: f64,
    next: u64,
}

impl MaglevTable {
    /// Builds a table of `size` slots (a prime) from weighted entries. Entries with
    /// weight 0 are left out; duplicate backends are merged (weights added).
    pub fn build(entries: &[Entry], size: u64) -> Result<MaglevTable, BuildError> {
        if !is_prime(size) || size > MAX_TABLE_SIZE {
            return Err(BuildError::TableSize(size));
        }
        // Merge duplicates and drop weight 0, keyed by Envoy's hash key.
        let mut keyed: Vec<(String, &EntryTarget, u64)> = Vec::with_capacity(entries.len());
        for e in entries.iter().filter(|e| e.weight > 0) {
            let key = match &e.target {
                EntryTarget::Backend(a) => a.to_string(),
                EntryTarget::Reject(name) => format!("reject:{name}"),
            };
            match keyed.iter_mut().find(|(k, _, _)| *k == key) {
                Some(k) => {
                    k.2 =
                        k.2.checked_add(e.weight)
                            .ok_or(BuildError::WeightOverflow)?
                }
                None => keyed.push((key, &e.target, e.weight)),
            }
        }
        keyed.sort_by(|a, b| a.0.cmp(&b.0));
        let sum: u64 = keyed
            .iter()
            .try_fold(0u64, |s, k| s.checked_add(k.2))
            .ok_or(BuildError::WeightOverflow)?;
        if sum > (1u64 << 53) {
            return Err(BuildError::WeightOverflow);
        }
        let mut backends = Vec::new();
        let mut build = Vec::with_capacity(keyed.len());
        let mut max_weight = 0f64;
        for (key, target, w) in &keyed {
            let slot_value = match target {
                EntryTarget::Backend(a) => {
                    let i = u32::try_from(backends.len())
                        .ok()
                        .filter(|i| *i < REJECT_SLOT)
                        .ok_or(BuildError::TooManyBackends(keyed.len()))?;
                    backends.push(*a);
                    i
                }
                EntryTarget::Reject(_) => REJECT_SLOT,
            };
            // Exact integers below 2^53: one correctly rounded division, as Envoy.
            let weight = *w as f64 / sum as f64;
            max_weight = max_weight.max(weight);
            build.push(BuildEntry {
                slot_value,
                offset: xxh64(key.as_bytes(), 0) % size,
                skip: xxh64(key.as_bytes(), 1) % (size - 1) + 1,
                weight,
                target: 0.0,
                next: 0,
            });
        }
        let len = usize::try_from(size).map_err(|_| BuildError::TableSize(size))?;
        if build.is_empty() {
            return Ok(MaglevTable {
                slots: vec![REJECT_SLOT; len].into_boxed_slice(),
                backends: Box::new([]),
            });
        }
        let mut slots: Vec<Option<u32>> = vec![None; len];
        let mut filled = 0usize;
        let mut iteration: u32 = 1;
        while filled < len {
            for e in build.iter_mut() {
                if filled >= len {
                    break;
                }
                if f64::from(iteration) * e.weight < e.target {
                    continue;
                }
                e.target += max_weight;
                let mut c = (e.offset + e.skip * e.next) % size;
                while slots[c as usize].is_some() {
                    e.next += 1;
                    c = (e.offset + e.skip * e.next) % size;
                }
                slots[c as usize] = Some(e.slot_value);
                e.next += 1;
                filled += 1;
            }
            iteration = iteration.saturating_add(1);
        }
        Ok(MaglevTable {
            slots: slots
                .into_iter()
                .map(|s| s.unwrap_or(REJECT_SLOT))
                .collect(),
            backends: backends.into_boxed_slice(),
        })
    }

    /// The slot for a flow hash.
    #[inline]
    pub fn pick(&self, hash: u64) -> Pick {
        // `slots` is never empty: `build` makes `size >= 2` slots.
        let i = (hash % self.slots.len() as u64) as usize;
        match self
            .slots
            .get(i)
            .and_then(|&s| self.backends.get(s as usize))
        {
            Some(a) => Pick::Backend(*a),
            None => Pick::Reject,
        }
    }

    /// Number of slots.
    pub fn size(&self) -> usize {
        self.slots.len()
    }

    /// The distinct backends, in hash-key order.
    pub fn backends(&self) -> &[SocketAddr] {
        &self.backends
    }

    /// Every slot in order (for `sluice tables --route` and tests).
    pub fn slots(&self) -> impl Iterator<Item = Pick> + '_ {
        (0..self.slots.len() as u64).map(|i| self.pick(i))
    }

    /// Slots owned by each backend (same order as [`MaglevTable::backends`]), and the
    /// number of reject slots.
    pub fn counts(&self) -> (Vec<usize>, usize) {
        let mut per = vec![0usize; self.backends.len()];
        let mut reject = 0;
        for &s in self.slots.iter() {
            match per.get_mut(s as usize) {
                Some(n) => *n += 1,
                None => reject += 1,
            }
        }
        (per, reject)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn host(port: u16) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], port))
    }

    fn entries(hosts: &[(u16, u64)]) -> Vec<Entry> {
        hosts
            .iter()
            .map(|&(p, w)| Entry {
                target: EntryTarget::Backend(host(p)),
                weight: w,
            })
            .collect()
    }

    fn ports(t: &MaglevTable) -> Vec<u16> {
        t.slots()
            .map(|p| match p {
                Pick::Backend(a) => a.port(),
                Pick::Reject => 0,
            })
            .collect()
    }

    /// Envoy `maglev_lb_test.cc` `Basic`: hosts 127.0.0.1:90..95, table size 7; the
    /// expected assignments {2, 4, 0, 1, 5, 0, 3} are indices into the host list.
    #[test]
    fn envoy_basic_table() {
        let t = MaglevTable::build(
            &entries(&[(90, 1), (91, 1), (92, 1), (93, 1), (94, 1), (95, 1)]),
            7,
        )
        .expect("build");
        assert_eq!(ports(&t), [92, 94, 90, 91, 95, 90, 93]);
        let (per, reject) = t.counts();
        assert_eq!(
            (per.iter().min(), per.iter().max(), reject),
            (Some(&1), Some(&2), 0)
        );
    }

    /// Envoy `Basic` is order-independent (`BasicStability`): shuffled input, same table.
    #[test]
    fn input_order_does_not_matter() {
        let a = MaglevTable::build(
            &entries(&[(95, 1), (90, 1), (93, 1), (91, 1), (94, 1), (92, 1)]),
            7,
        )
        .expect("build");
        assert_eq!(ports(&a), [92, 94, 90, 91, 95, 90, 93]);
    }

    /// Envoy `Weighted`: 127.0.0.1:90 weight 1, :91 weight 2, table size 17.
    #[test]
    fn envoy_weighted_table() {
        let t = MaglevTable::build(&entries(&[(90, 1), (91, 2)]), 17).expect("build");
        let expect: Vec<u16> = [1, 0, 0, 1, 0, 1, 1, 0, 1, 1, 1, 1, 1, 0, 1, 0, 1]
            .iter()
            .map(|&i| 90 + i)
            .collect();
        assert_eq!(ports(&t), expect);
        let (per, _) = t.counts();
        assert_eq!(per, [6, 11]);
    }

    /// Envoy `WeightedSingleHost`: one host of weight 7 owns every slot.
    #[test]
    fn single_host_owns_everything() {
        let t = MaglevTable::build(&entries(&[(90, 7)]), 17).expect("build");
        assert!(t.slots().all(|p| p == Pick::Backend(host(90))));
    }

    #[test]
    fn weight_zero_never_appears_and_total_zero_rejects() {
        let t = MaglevTable::build(&entries(&[(90, 1), (91, 0)]), 17).expect("build");
        assert!(t.slots().all(|p| p == Pick::Backend(host(90))));
        let t = MaglevTable::build(&entries(&[(90, 0)]), 17).expect("build");
        assert!(t.slots().all(|p| p == Pick::Reject));
        let t = MaglevTable::build(&[], 7).expect("build");
        assert_eq!(t.pick(3), Pick::Reject);
    }

    #[test]
    fn reject_entries_get_their_share() {
        let mut e = entries(&[(90, 20)]);
        e.push(Entry {
            target: EntryTarget::Reject("ns/ghost:80".into()),
            weight: 80,
        });
        let t = MaglevTable::build(&e, DEFAULT_TABLE_SIZE).expect("build");
        let (per, reject) = t.counts();
        let share = reject as f64 / DEFAULT_TABLE_SIZE as f64;
        assert!((share - 0.8).abs() < 0.001, "{share}");
        assert_eq!(per[0] + reject, DEFAULT_TABLE_SIZE as usize);
    }

    #[test]
    fn equal_weights_balance_within_one_slot() {
        for n in [2u16, 3, 5, 10, 64, 100] {
            let hosts: Vec<(u16, u64)> = (0..n).map(|i| (1000 + i, 1)).collect();
            let t = MaglevTable::build(&entries(&hosts), DEFAULT_TABLE_SIZE).expect("build");
            let (per, _) = t.counts();
            let m = DEFAULT_TABLE_SIZE as usize;
            let (lo, hi) = (m / usize::from(n), m.div_ceil(usize::from(n)));
            for c in per {
                assert!((lo..=hi).contains(&c), "n={n}: {c} not in {lo}..={hi}");
            }
        }
    }

    #[test]
    fn removing_one_backend_moves_about_its_share() {
        let n = 10u16;
        let all: Vec<(u16, u64)> = (0..n).map(|i| (2000 + i, 1)).collect();
        let a = MaglevTable::build(&entries(&all), DEFAULT_TABLE_SIZE).expect("build");
        let b = MaglevTable::build(&entries(&all[1..]), DEFAULT_TABLE_SIZE).expect("build");
        let moved = a
            .slots()
            .zip(b.slots())
            .filter(|(x, y)| x != y && *x != Pick::Backend(host(2000)))
            .count();
        // Slots of the removed backend must move; of the others, only a few percent.
        let frac = moved as f64 / DEFAULT_TABLE_SIZE as f64;
        assert!(frac < 0.05, "{frac}");
    }

    #[test]
    fn sizes_must_be_prime() {
        assert_eq!(
            MaglevTable::build(&entries(&[(90, 1)]), 65536),
            Err(BuildError::TableSize(65536))
        );
        assert!(is_prime(65537) && is_prime(7) && !is_prime(1) && !is_prime(9));
    }

    #[test]
    fn ipv6_keys_use_brackets() {
        let a: SocketAddr = "[fd00::1]:443".parse().expect("addr");
        assert_eq!(a.to_string(), "[fd00::1]:443");
        let t = MaglevTable::build(
            &[Entry {
                target: EntryTarget::Backend(a),
                weight: 1,
            }],
            7,
        )
        .expect("build");
        assert_eq!(t.pick(0), Pick::Backend(a));
    }
}
