//! Types shared by the call-counting programs (`calls_entry`,
//! `calls_return`) and `rip-probe calls`.
//!
//! Each probed function has an id (its index in the loader's list). Calls
//! are counted and timed in a per-CPU array indexed by that id, so no event
//! crosses to user space per call and no count is lost; only outliers go
//! through a small ring buffer.

/// The most functions one `calls` run probes: each costs an entry in the
/// per-CPU statistics array (a [`CallStats`] per CPU) and two attachments.
pub const MAX_FUNCTIONS: u32 = 64;

/// Nested probed calls timed per thread; deeper calls are counted but not
/// timed ([`CallStats::untimed`]).
pub const MAX_DEPTH: u32 = 64;

/// Linear sub-buckets per power of two in [`CallStats::buckets`]: the
/// percentiles taken from the histogram are then within a quarter of the
/// value.
pub const SUB_BUCKETS: u32 = 4;

/// Latency buckets: values 0..4 ns exactly, then [`SUB_BUCKETS`] per power
/// of two up to 2^63 ns.
pub const BUCKETS: usize = 256;

/// The bucket of a latency of `ns` nanoseconds: `ns` itself below 4, then
/// `4 * (log2(ns) - 1) + s`, where `s` is the two bits after the leading
/// one. Written without loops or tables so the BPF program and user space
/// share it.
#[inline(always)]
pub fn bucket(ns: u64) -> usize {
    if ns < 4 {
        return ns as usize;
    }
    let k = crate::log2(ns);
    let sub = (ns >> (k - 2)) & 3;
    (4 * (k - 1) + sub) as usize
}

/// The latencies bucket `i` holds: `[lo, hi)` in nanoseconds (`hi` is
/// `u64::MAX` for the last).
pub fn bucket_bounds(i: usize) -> (u64, u64) {
    if i < 4 {
        return (i as u64, i as u64 + 1);
    }
    let k = (i / 4 + 1) as u32;
    let sub = (i % 4) as u64;
    let lo = (4 + sub) << (k - 2);
    let hi = (5 + sub).checked_shl(k - 2).unwrap_or(u64::MAX);
    // 8 << 61 overflows: the last bucket reaches the end of the range.
    (lo, if hi < lo { u64::MAX } else { hi })
}

/// Per function and per CPU: calls entered, and the latencies of the calls
/// that returned. User space sums the CPUs.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CallStats {
    /// Calls entered.
    pub calls: u64,
    /// Calls entered but not timed: deeper than [`MAX_DEPTH`] nested
    /// probed calls, or the per-thread table was full.
    pub untimed: u64,
    /// Calls that returned and were timed.
    pub returned: u64,
    /// Sum of their latencies, ns.
    pub sum_ns: u64,
    /// Shortest latency, ns (meaningless while `returned` is 0: the map
    /// starts zeroed).
    pub min_ns: u64,
    /// Longest latency, ns.
    pub max_ns: u64,
    /// Outliers sent to user space.
    pub outliers: u64,
    /// Outliers not sent: the ring buffer was full.
    pub outliers_dropped: u64,
    /// Latency histogram, see [`bucket`].
    pub buckets: [u64; BUCKETS],
}

impl Default for CallStats {
    fn default() -> Self {
        CallStats {
            calls: 0,
            untimed: 0,
            returned: 0,
            sum_ns: 0,
            min_ns: u64::MAX,
            max_ns: 0,
            outliers: 0,
            outliers_dropped: 0,
            buckets: [0; BUCKETS],
        }
    }
}

impl CallStats {
    /// Adds `other` (another CPU's share) to `self`.
    pub fn merge(&mut self, other: &CallStats) {
        self.calls += other.calls;
        self.untimed += other.untimed;
        self.returned += other.returned;
        self.sum_ns += other.sum_ns;
        // A CPU that timed nothing has no minimum (its map value starts
        // zeroed).
        if other.returned > 0 {
            self.min_ns = self.min_ns.min(other.min_ns);
            self.max_ns = self.max_ns.max(other.max_ns);
        }
        self.outliers += other.outliers;
        self.outliers_dropped += other.outliers_dropped;
        for (a, b) in self.buckets.iter_mut().zip(other.buckets.iter()) {
            *a += b;
        }
    }
}

/// A call in flight, kept in `CALL_ENTRIES` under ([`CallKey`]) its
/// thread and depth from entry to return.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CallEntry {
    /// CLOCK_MONOTONIC ns at entry.
    pub ts_ns: u64,
    /// The stack pointer at entry: the return leaves it 8 bytes higher,
    /// which is how a return is matched to its entry.
    pub sp: u64,
    /// The function's id.
    pub fn_id: u32,
    /// Explicit padding, always 0.
    pub _pad: u32,
}

/// Key of `CALL_ENTRIES`: a thread and a nesting depth of probed calls.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CallKey {
    /// Thread id.
    pub tid: u32,
    /// Probed calls the thread is in, outside this one.
    pub depth: u32,
}

/// Bytes of the caller's stack copied with each outlier: its callers are
/// unwound from them in user space (deeper frames are cut).
pub const OUTLIER_STACK: usize = 8 << 10;

/// A call slower than its function's threshold, sent through
/// `CALL_OUTLIERS`, with a copy of the stack it returned to: the caller's
/// frames are as they were at entry, so user space unwinds the thread's
/// stack at entry from it.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "user", derive(zerocopy::FromBytes))]
pub struct CallOutlier {
    /// CLOCK_MONOTONIC ns at entry.
    pub start_ns: u64,
    /// Latency, ns.
    pub duration_ns: u64,
    /// The caller's return address (where the call returned to).
    pub ret_addr: u64,
    /// Thread id.
    pub tid: u32,
    /// The function's id.
    pub fn_id: u32,
    /// The stack pointer after the return (the caller's).
    pub sp: u64,
    /// `rbp` after the return (the caller's frame pointer, if it has one).
    pub bp: u64,
    /// Bytes of `stack` copied (0: none could be read).
    pub stack_len: u32,
    /// Explicit padding, always 0.
    pub _pad: u32,
    /// The stack from `sp` up.
    pub stack: [u8; OUTLIER_STACK],
}

// Padded by hand: no implicit padding.
const _: () = {
    assert!(core::mem::size_of::<CallEntry>() == 24);
    assert!(core::mem::size_of::<CallOutlier>() == 56 + OUTLIER_STACK);
    assert!(core::mem::size_of::<CallStats>() == 8 * (8 + BUCKETS));
};

/// Names of the call-counting maps and programs.
pub mod names {
    /// The entry uprobe.
    pub const CALLS_ENTRY: &str = "calls_entry";
    /// The return uprobe (uretprobe).
    pub const CALLS_RETURN: &str = "calls_return";
    /// The sched_process_exit tracepoint that frees an exiting thread's
    /// entries.
    pub const CALLS_THREAD_EXIT: &str = "calls_thread_exit";
    /// Function id by runtime address, `HashMap<u64, u32>`.
    pub const CALL_IDS: &str = "CALL_IDS";
    /// Per-function statistics, `PerCpuArray<CallStats>`.
    pub const CALL_STATS: &str = "CALL_STATS";
    /// Outlier threshold per function id, ns, `Array<u64>`.
    pub const CALL_THRESHOLDS: &str = "CALL_THRESHOLDS";
    /// Calls in flight, `HashMap<CallKey, CallEntry>`.
    pub const CALL_ENTRIES: &str = "CALL_ENTRIES";
    /// Probed calls each thread is in, `HashMap<u32, u32>`.
    pub const CALL_DEPTH: &str = "CALL_DEPTH";
    /// Outliers, `RingBuf` of [`super::CallOutlier`].
    pub const CALL_OUTLIERS: &str = "CALL_OUTLIERS";
}

#[cfg(feature = "user")]
mod pod {
    // SAFETY: #[repr(C)] structs of integers with explicit padding fields:
    // every bit pattern is a valid value.
    unsafe impl aya::Pod for super::CallStats {}
    // SAFETY: as above.
    unsafe impl aya::Pod for super::CallEntry {}
    // SAFETY: as above.
    unsafe impl aya::Pod for super::CallKey {}
    // SAFETY: as above.
    unsafe impl aya::Pod for super::CallOutlier {}
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_hold_their_bounds() {
        for ns in (0..5000u64).chain([1 << 20, 3_000_000, 24_000_000, u64::MAX / 3, u64::MAX]) {
            let i = bucket(ns);
            assert!(i < BUCKETS, "{ns}");
            let (lo, hi) = bucket_bounds(i);
            assert!(
                lo <= ns && (ns < hi || hi == u64::MAX),
                "{ns}: [{lo}, {hi})"
            );
        }
        // Consecutive buckets tile the range.
        for i in 0..251 {
            assert_eq!(bucket_bounds(i).1, bucket_bounds(i + 1).0, "{i}");
        }
        assert_eq!(bucket_bounds(bucket(3_000_000)).0 >> 21, 1);
    }

    #[test]
    fn a_cpu_that_timed_nothing_has_no_minimum() {
        let mut sum = CallStats::default();
        let zeroed = CallStats {
            min_ns: 0,
            calls: 2,
            ..CallStats::default()
        };
        let timed = CallStats {
            calls: 1,
            returned: 1,
            min_ns: 500,
            max_ns: 500,
            ..CallStats::default()
        };
        sum.merge(&zeroed);
        sum.merge(&timed);
        assert_eq!(
            (sum.calls, sum.returned, sum.min_ns, sum.max_ns),
            (3, 1, 500, 500)
        );
    }
}
