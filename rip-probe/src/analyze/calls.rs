//! `rip-probe calls`: each function's counts and latencies, summed over
//! CPUs by the collector, turned into the report's figures; and the
//! outlier thresholds a training window sets.

use rip_ebpf::calls::{CallStats, bucket_bounds};

use super::hist::Log2Hist;
use crate::model::calls::{Bounds, FunctionCalls};

/// The figures of one function from its statistics. `function`,
/// `module` and `module_offset` name it; `threshold_ns` is the outlier
/// threshold it had (0: none).
pub(crate) fn function_calls(
    function: String,
    module: String,
    module_offset: u64,
    s: &CallStats,
    threshold_ns: u64,
) -> FunctionCalls {
    let timed = s.returned > 0;
    let mut hist = Log2Hist::default();
    for (i, &n) in s.buckets.iter().enumerate() {
        if n != 0 {
            // A sub-bucket lies within one power of two: its lower bound
            // says which.
            hist.add(bucket_bounds(i).0, n);
        }
    }
    FunctionCalls {
        function,
        module,
        module_offset,
        calls: s.calls,
        timed: s.returned,
        min_ns: timed.then_some(s.min_ns),
        mean_ns: timed.then(|| s.sum_ns / s.returned),
        p50: percentile(s, 50),
        p99: percentile(s, 99),
        max_ns: timed.then_some(s.max_ns),
        histogram: hist.buckets(),
        threshold_ns: (threshold_ns != 0).then_some(threshold_ns),
        outliers: s.outliers + s.outliers_dropped,
    }
}

/// The `q`th percentile (nearest rank) of the timed calls: the bucket
/// holding it, narrowed to the exact minimum and maximum.
pub(crate) fn percentile(s: &CallStats, q: u64) -> Option<Bounds> {
    let total: u64 = s.buckets.iter().sum();
    if total == 0 {
        return None;
    }
    let rank = (total * q).div_ceil(100).max(1);
    let mut seen = 0;
    let i = s.buckets.iter().position(|&n| {
        seen += n;
        seen >= rank
    })?;
    let (lo, hi) = bucket_bounds(i);
    Some(Bounds {
        lo_ns: lo.max(s.min_ns),
        hi_ns: hi.min(s.max_ns.saturating_add(1)),
    })
}

/// Thresholds for `--outlier PERCENT`: that share of the slowest call of
/// each function in the training window (0, no outliers, for a function
/// not timed in it).
pub(crate) fn trained_thresholds(training: &[CallStats], percent: u32) -> Vec<u64> {
    training
        .iter()
        .map(|s| {
            if s.returned == 0 {
                0
            } else {
                // At least 1 ns: 0 means "no threshold" to the program.
                (u128::from(s.max_ns) * u128::from(percent) / 100).clamp(1, u128::from(u64::MAX))
                    as u64
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use rip_ebpf::calls::bucket;

    use super::*;

    fn stats(latencies: &[u64]) -> CallStats {
        let mut s = CallStats::default();
        for &ns in latencies {
            s.calls += 1;
            s.returned += 1;
            s.sum_ns += ns;
            s.min_ns = s.min_ns.min(ns);
            s.max_ns = s.max_ns.max(ns);
            s.buckets[bucket(ns)] += 1;
        }
        s
    }

    #[test]
    fn figures_of_known_latencies() {
        let mut lat = vec![3_000_000; 98];
        lat.extend([24_000_000, 25_000_000]);
        let f = function_calls("f".into(), "m".into(), 0, &stats(&lat), 0);
        assert_eq!((f.calls, f.timed), (100, 100));
        assert_eq!(f.min_ns, Some(3_000_000));
        assert_eq!(f.max_ns, Some(25_000_000));
        assert_eq!(f.mean_ns, Some((98 * 3_000_000 + 49_000_000) / 100));
        let p50 = f.p50.unwrap();
        assert!(p50.lo_ns <= 3_000_000 && 3_000_000 < p50.hi_ns, "{p50:?}");
        assert_eq!(p50.lo_ns, 3_000_000, "narrowed to the minimum");
        let p99 = f.p99.unwrap();
        assert!(p99.lo_ns <= 24_000_000 && 24_000_000 < p99.hi_ns, "{p99:?}");
        // A quarter of a power of two at most.
        assert!(p99.hi_ns - p99.lo_ns <= (1 << 24) / 4, "{p99:?}");
        let counts: Vec<(u64, u64)> = f.histogram.iter().map(|b| (b.lo_ns, b.count)).collect();
        assert_eq!(
            counts,
            [(1 << 21, 98), (1 << 22, 0), (1 << 23, 0), (1 << 24, 2)]
        );
        assert_eq!(f.threshold_ns, None);
    }

    #[test]
    fn untimed_functions_have_no_figures() {
        let s = CallStats {
            calls: 5,
            ..CallStats::default()
        };
        let f = function_calls("f".into(), "m".into(), 0, &s, 7);
        assert_eq!(f.calls, 5);
        assert!(f.min_ns.is_none() && f.p50.is_none() && f.histogram.is_empty());
        assert_eq!(f.threshold_ns, Some(7));
    }

    #[test]
    fn thresholds_from_training() {
        let t = trained_thresholds(&[stats(&[1000, 4000]), CallStats::default()], 250);
        assert_eq!(t, [10_000, 0]);
    }
}
