//! Field checks shared by several kinds: ports, selectors, CIDRs, weights, Maglev sizes.

use ipnet::IpNet;

use crate::diag::Reporter;
use crate::load::Item;
use crate::model::meta::{LabelSelector, SelectorOperator};

/// Largest weight accepted on a route destination or backendRef.
pub const MAX_WEIGHT: i64 = 1_000_000;
/// Most backendRefs in one TCPRoute/UDPRoute/TLSRoute rule.
pub const MAX_BACKEND_REFS: usize = 16;

/// A port number is in 1..65535.
pub(super) fn port_number(it: &Item, at: &str, n: i64, r: &mut Reporter) {
    if !(1..=65535).contains(&n) {
        r.error(&it.path(at), format!("port {n} is out of range 1..65535"));
    }
}

/// A label selector's expressions are well formed.
pub(super) fn selector(it: &Item, at: &str, s: &LabelSelector, r: &mut Reporter) {
    for (i, e) in s.match_expressions.iter().enumerate() {
        let here = format!("{at}.matchExpressions[{i}]");
        match e.operator {
            SelectorOperator::In | SelectorOperator::NotIn if e.values.is_empty() => r.error(
                &it.path(&format!("{here}.values")),
                format!("operator {:?} needs at least one value", e.operator),
            ),
            SelectorOperator::Exists | SelectorOperator::DoesNotExist if !e.values.is_empty() => r
                .error(
                    &it.path(&format!("{here}.values")),
                    format!("operator {:?} takes no values", e.operator),
                ),
            _ => {}
        }
        if e.key.is_empty() {
            r.error(&it.path(&format!("{here}.key")), "empty label key");
        }
    }
}

/// Parses a CIDR; a prefix with host bits set is normalised (warning), garbage is an
/// error. Returns the normalised network.
pub fn cidr(it: &Item, at: &str, s: &str, r: &mut Reporter) -> Option<IpNet> {
    match s.parse::<IpNet>() {
        Ok(n) => {
            if n.trunc() != n {
                r.warn(
                    &it.path(at),
                    format!("`{s}` has host bits set; normalised to `{}`", n.trunc()),
                );
            }
            Some(n.trunc())
        }
        Err(_) => {
            r.error(
                &it.path(at),
                format!("`{s}` is not a CIDR (like 10.0.0.0/8 or fd00::/8)"),
            );
            None
        }
    }
}

/// A route weight is in 0..[`MAX_WEIGHT`].
pub(super) fn weight(it: &Item, at: &str, w: Option<i64>, r: &mut Reporter) {
    if let Some(w) = w {
        if !(0..=MAX_WEIGHT).contains(&w) {
            r.error(
                &it.path(at),
                format!("weight {w} is out of range 0..{MAX_WEIGHT}"),
            );
        }
    }
}

/// Whether `n` is prime (Maglev table sizes must be).
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

/// Largest Maglev table size plus one: Istio requires a prime below 5000011.
pub const MAGLEV_SIZE_LIMIT: u64 = sluice_dataplane::tables::maglev::MAX_TABLE_SIZE;

/// A Maglev table size is a prime below [`MAGLEV_SIZE_LIMIT`] (Istio's rule).
pub(super) fn maglev_size(it: &Item, at: &str, size: Option<u64>, r: &mut Reporter) {
    if let Some(s) = size {
        if !is_prime(s) || s >= MAGLEV_SIZE_LIMIT {
            r.error(
                &it.path(at),
                format!("Maglev table size {s} must be a prime less than {MAGLEV_SIZE_LIMIT}"),
            );
        }
    }
}
