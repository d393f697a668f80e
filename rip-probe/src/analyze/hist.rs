//! Log2 histograms, as SystemTap's `@hist_log` and bpftrace's `hist()`
//! keep them: bucket 0 holds 0, bucket `k + 1` holds `[2^k, 2^(k+1))`.

use crate::model::Bucket;

/// Counts of values in log2 buckets.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Log2Hist {
    counts: [u64; 65],
}

impl Default for Log2Hist {
    fn default() -> Self {
        Log2Hist { counts: [0; 65] }
    }
}

impl Log2Hist {
    /// The bucket of `v`.
    pub fn index(v: u64) -> usize {
        if v == 0 {
            0
        } else {
            64 - v.leading_zeros() as usize
        }
    }

    /// `[lo, hi)` of bucket `i` (`hi` is `u64::MAX` for the last).
    pub fn bounds(i: usize) -> (u64, u64) {
        match i {
            0 => (0, 1),
            64 => (1 << 63, u64::MAX),
            i => (1 << (i - 1), 1 << i),
        }
    }

    /// Adds `n` values equal to `v`.
    pub fn add(&mut self, v: u64, n: u64) {
        self.counts[Self::index(v)] += n;
    }

    /// The buckets from the first non-empty one to the last, the empty
    /// ones between included (as bpftrace prints them); none when empty.
    pub fn buckets(&self) -> Vec<Bucket> {
        let Some(first) = self.counts.iter().position(|&c| c != 0) else {
            return Vec::new();
        };
        let last = self.counts.iter().rposition(|&c| c != 0).unwrap_or(first);
        (first..=last)
            .map(|i| {
                let (lo_ns, hi_ns) = Self::bounds(i);
                Bucket {
                    lo_ns,
                    hi_ns,
                    count: self.counts[i],
                }
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_land_in_their_power_of_two() {
        for v in [0, 1, 2, 3, 4, 7, 8, 1000, 3_000_000, 24_000_000, u64::MAX] {
            let (lo, hi) = Log2Hist::bounds(Log2Hist::index(v));
            assert!(lo <= v && (v < hi || hi == u64::MAX), "{v}: [{lo}, {hi})");
        }
        let mut h = Log2Hist::default();
        assert!(h.buckets().is_empty());
        h.add(3_000_000, 2);
        h.add(24_000_000, 1);
        let b = h.buckets();
        assert_eq!(b.len(), 4, "{b:?}");
        assert_eq!((b[0].lo_ns, b[0].hi_ns, b[0].count), (1 << 21, 1 << 22, 2));
        assert_eq!(b[1].count + b[2].count, 0);
        assert_eq!((b[3].lo_ns, b[3].count), (1 << 24, 1));
    }
}
