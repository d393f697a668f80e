//! The sampled live heap of a ring, grouped by allocating stack, each
//! sample counted for the bytes librip's estimator says it stands for.

use std::collections::HashMap;

use crate::{collect::ring::AllocEvidence, model::sampled::SampledStack};

/// Groups the live samples by stack, most estimated bytes first.
/// `unix_ns` turns the writer's CLOCK_MONOTONIC times into wall-clock.
pub(crate) fn stacks(table: &AllocEvidence, unix_ns: impl Fn(u64) -> u64) -> Vec<SampledStack> {
    let mut by: HashMap<&[u64], (u64, u64, f64, u64)> = HashMap::new();
    for a in &table.live {
        let e = by.entry(&a.frames).or_insert((0, 0, 0.0, u64::MAX));
        e.0 += 1;
        e.1 += a.requested;
        e.2 += a.estimated_bytes;
        e.3 = e.3.min(a.time_ns);
    }
    let mut v: Vec<SampledStack> = by
        .into_iter()
        .map(|(addrs, (n, bytes, est, oldest))| SampledStack {
            samples: n,
            sampled_bytes: bytes,
            estimated_bytes: est.round() as u64,
            oldest_unix_ns: unix_ns(oldest),
            frames: Vec::new(),
            addrs: addrs.to_vec(),
        })
        .collect();
    v.sort_by(|a, b| {
        b.estimated_bytes
            .cmp(&a.estimated_bytes)
            .then_with(|| a.addrs.cmp(&b.addrs))
    });
    v
}

#[cfg(test)]
mod tests {
    use crate::collect::ring::{AllocEvidence, LiveSample};

    /// A sample weighed as librip's estimator does at mean 1000.
    fn alloc(frames: &[u64], size: u64, t: u64) -> LiveSample {
        LiveSample {
            requested: size,
            estimated_bytes: librip::reader::alloc::estimated_bytes(size, 1000),
            time_ns: t,
            frames: frames.to_vec(),
        }
    }

    #[test]
    fn groups_by_stack_and_scales_by_the_estimator() {
        let table = AllocEvidence {
            mean: 1000,
            sampled: 3,
            dropped: 0,
            freed: 0,
            torn: 0,
            live: vec![
                alloc(&[1, 2], 100, 5),
                alloc(&[1, 2], 100, 3),
                alloc(&[1, 3], 5000, 9),
            ],
        };
        let s = super::stacks(&table, |t| t + 1);
        assert_eq!(s.len(), 2);
        // 5000 bytes at mean 1000: sampled with probability 1 - e^-5.
        assert_eq!(s[0].addrs, [1, 3]);
        assert_eq!(s[0].estimated_bytes, 5034);
        assert_eq!(s[1].samples, 2);
        assert_eq!(s[1].sampled_bytes, 200);
        // Each 100-byte sample stands for 100 / (1 - e^-0.1) = 1050.8 bytes.
        assert_eq!(s[1].estimated_bytes, 2102);
        assert_eq!(s[1].oldest_unix_ns, 4);
    }
}
