//! The sampled live heap of a ring, grouped by allocating stack and scaled
//! by the sampling estimator (librip::reader::alloc::estimated_bytes).

use std::collections::HashMap;

use librip::reader::alloc::{AllocTable, estimated_bytes};

use crate::model::sampled::SampledStack;

/// Groups `table`'s live samples by stack, most estimated bytes first.
/// `unix_ns` turns the writer's CLOCK_MONOTONIC times into wall-clock.
pub(crate) fn stacks(table: &AllocTable, unix_ns: impl Fn(u64) -> u64) -> Vec<SampledStack> {
    let mut by: HashMap<&[u64], (u64, u64, f64, u64)> = HashMap::new();
    for a in &table.live {
        let e = by.entry(&a.frames).or_insert((0, 0, 0.0, u64::MAX));
        e.0 += 1;
        e.1 += a.requested;
        e.2 += estimated_bytes(a.requested, table.mean);
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
    use librip::reader::alloc::{AllocTable, Allocation};

    fn alloc(frames: &[u64], size: u64, t: u64) -> Allocation {
        Allocation {
            addr: t * 64,
            size,
            requested: size,
            tid: 1,
            time_ns: t,
            frames: frames.to_vec(),
        }
    }

    #[test]
    fn groups_by_stack_and_scales_by_the_estimator() {
        let table = AllocTable {
            mean: 1000,
            capacity: 16,
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
