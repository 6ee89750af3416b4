//! Statistics of benchmark figures: one implementation of each, used by every benchmark.
//!
//! - [`Latencies`]: many latency-like integer samples (µs, ns, cycles; thousands to
//!   millions of them) in an HdrHistogram of three significant digits, read as
//!   percentiles. Recording is O(1) and memory does not grow with the sample count.
//! - [`quantile`], [`median`], [`min`]: of a handful of `f64` figures (the rates or
//!   cycles of a benchmark's rounds or runs). These sort a copy (a few dozen numbers) and
//!   take the element at rank `⌊q·n⌋`: the median of an even count is its upper middle
//!   element, the upper quartile of 8 runs is the 7th. No interpolation, so every
//!   reported figure is one that was measured.

use hdrhistogram::Histogram;

/// Latency-like integer samples, summarised by percentiles (HdrHistogram, three
/// significant digits: a percentile is within 0.1 % of a recorded value).
#[derive(Debug, Clone)]
pub struct Latencies(Histogram<u64>);

impl Default for Latencies {
    fn default() -> Self {
        Latencies::new()
    }
}

impl Latencies {
    /// An empty set (auto-resizing: any `u64` can be recorded).
    pub fn new() -> Latencies {
        // `new` refuses only more than five significant digits.
        Latencies(Histogram::new(3).expect("3 significant digits are valid"))
    }

    /// Records one sample.
    pub fn record(&mut self, v: u64) {
        // `record` grows the histogram (auto-resize is on; `saturating_record` would
        // clamp to its current range instead); it refuses only values beyond what any
        // size can track, which are then clamped.
        if self.0.record(v).is_err() {
            self.0.saturating_record(v);
        }
    }

    /// How many samples were recorded.
    pub fn len(&self) -> u64 {
        self.0.len()
    }

    /// Whether nothing was recorded.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The value at quantile `q` (0..=1: 0.5 is the median, 0.99 the 99th percentile);
    /// 0 when empty.
    pub fn quantile(&self, q: f64) -> u64 {
        if self.0.is_empty() {
            0
        } else {
            self.0.value_at_quantile(q.clamp(0.0, 1.0))
        }
    }

    /// The largest sample (to the histogram's precision); 0 when empty.
    pub fn max(&self) -> u64 {
        self.0.max()
    }

    /// Adds every sample of `other`.
    pub fn merge(&mut self, other: &Latencies) {
        // Both auto-resize: adding cannot fail.
        let _ = self.0.add(&other.0);
    }
}

impl Extend<u64> for Latencies {
    fn extend<I: IntoIterator<Item = u64>>(&mut self, iter: I) {
        for v in iter {
            self.record(v);
        }
    }
}

impl FromIterator<u64> for Latencies {
    fn from_iter<I: IntoIterator<Item = u64>>(iter: I) -> Self {
        let mut l = Latencies::new();
        l.extend(iter);
        l
    }
}

/// The element at rank `⌊q·n⌋` of `v` sorted (`q` in 0..=1, 1 is the largest); 0 when
/// empty. For a handful of run figures; many samples go to [`Latencies`].
pub fn quantile(v: &[f64], q: f64) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    let rank = (s.len() as f64 * q.clamp(0.0, 1.0)) as usize;
    s[rank.min(s.len() - 1)]
}

/// The median of `v` (its upper middle element for an even count); 0 when empty.
pub fn median(v: &[f64]) -> f64 {
    quantile(v, 0.5)
}

/// The smallest of `v` (the best of a set of timings); 0 when empty.
pub fn min(v: &[f64]) -> f64 {
    quantile(v, 0.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn run_figures_take_the_element_at_rank_q_n() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), 2.0);
        // Upper middle of an even count, as before this module.
        assert_eq!(median(&[4.0, 1.0, 3.0, 2.0]), 3.0);
        assert_eq!(median(&[]), 0.0);
        let eight = [10.0, 12.9, 13.0, 13.1, 13.0, 9.0, 9.5, 30.0];
        assert_eq!(quantile(&eight, 0.75), 13.1);
        assert_eq!(quantile(&eight, 0.25), 10.0);
        assert_eq!(quantile(&eight, 1.0), 30.0);
        assert_eq!(min(&eight), 9.0);
        let fifteen: Vec<f64> = (0..15).map(f64::from).rev().collect();
        assert_eq!(median(&fifteen), 7.0);
        assert_eq!(quantile(&fifteen, 0.25), 3.0);
    }

    #[test]
    fn latencies_give_percentiles_within_a_tenth_of_a_percent() {
        let l: Latencies = (1..=10_000u64).collect();
        assert_eq!(l.len(), 10_000);
        let near = |got: u64, want: u64| got.abs_diff(want) * 1000 <= want;
        assert!(near(l.quantile(0.5), 5_000), "{}", l.quantile(0.5));
        assert!(near(l.quantile(0.99), 9_900), "{}", l.quantile(0.99));
        assert!(near(l.max(), 10_000));
        assert_eq!(Latencies::new().quantile(0.5), 0);
        assert!(Latencies::new().is_empty());
        let mut a: Latencies = [5u64].into_iter().collect();
        a.merge(&[7u64].into_iter().collect());
        assert_eq!((a.len(), a.quantile(0.0), a.quantile(1.0)), (2, 5, 7));
    }
}
