//! A duration histogram of fixed size, for the wait and hold times `INFO
//! lock` shows as percentiles. Log-linear buckets, as HdrHistogram (which
//! Redis's own `latencystats` uses) lays them out: 16 linear buckets per
//! power of two, so a reported percentile is within 1/16 (6.25 %) above the
//! true value, and the memory is the same whatever the traffic or the
//! number of keys.

/// Linear buckets per power of two (a power of two itself).
const SUB: u64 = 16;
const SUB_BITS: u32 = SUB.trailing_zeros();
/// Values up to 2^MAX_BITS - 1 ms (~35 years) have buckets; larger ones
/// are counted in the last.
const MAX_BITS: u32 = 40;
/// Buckets: the first `SUB` hold 0..SUB exactly, then `SUB` per power of two.
pub const BUCKETS: usize = (SUB + (MAX_BITS - SUB_BITS) as u64 * SUB) as usize;

/// The bucket of a duration of `ms`.
pub fn bucket_of(ms: u64) -> usize {
    if ms < SUB {
        return ms as usize;
    }
    let top = 63 - ms.leading_zeros(); // >= SUB_BITS
    if top >= MAX_BITS {
        return BUCKETS - 1;
    }
    let shift = top - SUB_BITS;
    let sub = (ms >> shift) - SUB; // 0..SUB
    (SUB + u64::from(shift) * SUB + sub) as usize
}

/// The largest duration that falls in bucket `i` (what a percentile
/// reports: never below the true value).
pub fn bucket_max(i: usize) -> u64 {
    let i = i.min(BUCKETS - 1) as u64;
    if i < SUB {
        return i;
    }
    let shift = (i - SUB) / SUB;
    let sub = (i - SUB) % SUB;
    ((SUB + sub + 1) << shift) - 1
}

/// The percentiles `INFO lock` shows, as Redis's `latencystats` does.
pub const SHOWN: [(&str, f64); 3] = [("p50", 50.0), ("p99", 99.0), ("p99.9", 99.9)];

#[derive(Clone, PartialEq, Eq, Debug)]
pub struct Histogram {
    counts: [u64; BUCKETS],
    total: u64,
    max: u64,
}

impl Default for Histogram {
    fn default() -> Self {
        Histogram { counts: [0; BUCKETS], total: 0, max: 0 }
    }
}

impl Histogram {
    pub fn record(&mut self, ms: u64) {
        let i = bucket_of(ms);
        self.counts[i] = self.counts[i].saturating_add(1);
        self.total = self.total.saturating_add(1);
        self.max = self.max.max(ms);
    }

    pub fn count(&self) -> u64 {
        self.total
    }

    /// The smallest bucket bound below which `p` percent of the durations
    /// fall (the recorded maximum if that is lower); `None` when empty.
    pub fn percentile(&self, p: f64) -> Option<u64> {
        if self.total == 0 {
            return None;
        }
        // The rank of the p-th percentile, 1-based, as HdrHistogram rounds it.
        let rank = ((p.clamp(0.0, 100.0) / 100.0 * self.total as f64).ceil() as u64).max(1);
        let mut seen = 0u64;
        for (i, &c) in self.counts.iter().enumerate() {
            seen += c;
            if seen >= rank {
                return Some(bucket_max(i).min(self.max));
            }
        }
        Some(self.max)
    }

    /// `p50=…,p99=…,p99.9=…` in ms, or an empty string with nothing recorded.
    pub fn summary(&self) -> String {
        let mut out = String::new();
        for (name, p) in SHOWN {
            if let Some(v) = self.percentile(p) {
                if !out.is_empty() {
                    out.push(',');
                }
                out.push_str(name);
                out.push('=');
                out.push_str(&v.to_string());
            }
        }
        out
    }

    /// The raw histogram `B=C,B=C,…`: each non-empty bucket's upper bound
    /// (ms) and count, ascending, so that a reader can subtract two readings
    /// and compute percentiles over the interval between them.
    pub fn raw(&self) -> String {
        let mut out = String::new();
        for (i, &c) in self.counts.iter().enumerate().filter(|(_, &c)| c > 0) {
            if !out.is_empty() {
                out.push(',');
            }
            out.push_str(&format!("{}={c}", bucket_max(i)));
        }
        out
    }

    pub fn reset(&mut self) {
        *self = Histogram::default();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_cover_every_value_in_order_with_bounded_error() {
        let mut last = 0;
        for ms in (0..70_000u64).chain([1 << 39, (1 << 40) - 1, 1 << 40, u64::MAX]) {
            let i = bucket_of(ms);
            assert!(i < BUCKETS);
            assert!(i >= last, "{ms}");
            last = i;
            if ms < (1 << 40) {
                let hi = bucket_max(i);
                assert!(hi >= ms, "{ms} in bucket {i} ending {hi}");
                // Within 1/16 above the true value.
                assert!(hi - ms <= ms / SUB, "{ms}: {hi}");
                // The bucket below ends below the value.
                if i > 0 {
                    assert!(bucket_max(i - 1) < ms);
                }
            }
        }
        assert_eq!(bucket_of(u64::MAX), BUCKETS - 1);
        assert_eq!(bucket_max(BUCKETS + 5), bucket_max(BUCKETS - 1));
    }

    #[test]
    fn percentiles_fall_in_the_bucket_of_the_true_value() {
        let mut h = Histogram::default();
        assert_eq!(h.percentile(50.0), None);
        assert_eq!(h.summary(), "");
        // 1..=1000 ms: the true p50 is 500, p99 990, p99.9 999.
        for ms in 1..=1000 {
            h.record(ms);
        }
        for (p, truth) in [(50.0, 500u64), (99.0, 990), (99.9, 999), (100.0, 1000)] {
            let got = h.percentile(p).unwrap();
            assert_eq!(bucket_of(got), bucket_of(truth), "p{p}: {got} vs {truth}");
            assert!(got >= truth);
        }
        assert_eq!(h.count(), 1000);
        // The maximum caps the top bucket's bound.
        assert_eq!(h.percentile(100.0), Some(1000));
        h.reset();
        h.record(0);
        assert_eq!(h.summary(), "p50=0,p99=0,p99.9=0");
    }

    #[test]
    fn a_few_slow_waits_show_in_the_tail_only() {
        let mut h = Histogram::default();
        for _ in 0..990 {
            h.record(2);
        }
        for _ in 0..10 {
            h.record(5_000);
        }
        assert_eq!(h.percentile(50.0), Some(2));
        assert_eq!(h.percentile(99.0), Some(2));
        let p999 = h.percentile(99.9).unwrap();
        assert_eq!(bucket_of(p999), bucket_of(5_000));
        assert_eq!(h.summary(), format!("p50=2,p99=2,p99.9={p999}"));
        assert_eq!(h.raw(), format!("2=990,{}=10", bucket_max(bucket_of(5_000))));
    }

    #[test]
    fn the_raw_form_lists_non_empty_buckets_in_order() {
        let mut h = Histogram::default();
        assert_eq!(h.raw(), "");
        for ms in [40, 3, 3, 17, 1_000_000] {
            h.record(ms);
        }
        // 17 and 40 share no bucket; their bounds are 17 and 41.
        assert_eq!(h.raw(), "3=2,17=1,41=1,1015807=1");
        assert_eq!(bucket_max(bucket_of(1_000_000)), 1_015_807);
    }
}
