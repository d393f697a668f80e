//! Types of the futex contention programs (`rip-probe locks`), shared with
//! user space: what the programs count per lock, per waiting thread and
//! per waking call site, all in hash maps read once at the end of the
//! window (no event is copied to user space).

/// Tracepoint field offsets for the futex programs, read by the loader from
/// `events/syscalls/sys_{enter,exit}_futex{,_waitv}/format` and written
/// into the programs' `LOCK_CONFIG` global.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LockConfig {
    /// Process whose threads are counted.
    pub target_tgid: u32,
    /// `uaddr` in sys_enter_futex.
    pub uaddr_off: u32,
    /// `op` in sys_enter_futex.
    pub op_off: u32,
    /// `val` in sys_enter_futex.
    pub val_off: u32,
    /// `ret` in sys_exit_futex (and sys_exit_futex_waitv).
    pub ret_off: u32,
    /// `waiters` in sys_enter_futex_waitv (0 when the kernel has none).
    pub waiters_off: u32,
}

/// log2 buckets of wait times: bucket 0 holds 0 ns, bucket `i` ≥ 1 holds
/// `[2^(i-1), 2^i)` ns (the last one everything from 2^62 ns up), as bpftrace's `hist()` and SystemTap's
/// `@hist_log` do.
pub const HIST_BUCKETS: usize = 64;

/// Words of the waker's user stack kept from its stack pointer up: where
/// libc's frameless futex wrappers return to, which a frame-pointer walk
/// skips.
pub const WAKER_STACK_WORDS: usize = 8;

/// A futex wait or wake a thread is in, between the syscall's entry and
/// exit, in `FUTEX_PENDING` keyed by thread id.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PendingFutex {
    /// The futex word.
    pub uaddr: u64,
    /// CLOCK_MONOTONIC ns at entry.
    pub start_ns: u64,
    /// The futex operation (with its flags).
    pub op: u32,
    /// The value the waiter expected.
    pub val: u32,
}

/// Per futex word, in `LOCK_STATS`.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LockStat {
    /// Waits that slept (returned other than `EAGAIN`, which a waiter gets
    /// when the word changed before it could sleep).
    pub waits: u64,
    /// Threads woken through this word (the return value of the wakes).
    pub wakes: u64,
    /// Sum of the waits' durations, ns.
    pub total_ns: u64,
    /// Longest wait, ns.
    pub max_ns: u64,
    /// The last wait's operation (with its flags): how the lock is waited on.
    pub op: u32,
    /// The last wait's expected value.
    pub val: u32,
    /// Waits per log2 bucket of their duration (see [`HIST_BUCKETS`]).
    pub hist: [u64; HIST_BUCKETS],
}

/// Key of `LOCK_WAITERS`: a futex word and a thread that waited on it.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct WaiterKey {
    /// The futex word.
    pub uaddr: u64,
    /// The waiting thread.
    pub tid: u32,
    /// Explicit padding, always 0.
    pub _pad: u32,
}

/// Per (futex word, thread), in `LOCK_WAITERS`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WaiterStat {
    /// Waits that slept.
    pub waits: u64,
    /// Their total duration, ns.
    pub total_ns: u64,
    /// The longest, ns.
    pub max_ns: u64,
}

/// Key of `LOCK_WAKERS`: a futex word and the user stack (id in
/// `USER_STACKS`, negative when none could be taken) of a call that woke
/// waiters on it.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct WakerKey {
    /// The futex word.
    pub uaddr: u64,
    /// The waker's user stack id.
    pub stack_id: i64,
}

/// Per (futex word, waking stack), in `LOCK_WAKERS`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WakerStat {
    /// Threads woken from this stack.
    pub wakes: u64,
    /// Wake calls that woke at least one.
    pub calls: u64,
    /// The last waking thread.
    pub tid: u32,
    /// Explicit padding, always 0.
    pub _pad: u32,
    /// The first time this stack woke: its user stack pointer...
    pub sp: u64,
    /// ... and the words above it (0 where unreadable).
    pub top: [u64; WAKER_STACK_WORDS],
}

/// Names of the futex programs and their maps.
pub mod names {
    /// sys_enter_futex, reading user registers with `bpf_task_pt_regs`.
    pub const FUTEX_ENTER: &str = "futex_enter";
    /// sys_exit_futex (and sys_exit_futex_waitv), with `bpf_task_pt_regs`.
    pub const FUTEX_EXIT: &str = "futex_exit";
    /// sys_exit_futex for kernels before 5.15 (registers from the top of
    /// the kernel stack).
    pub const FUTEX_EXIT_KSTACK: &str = "futex_exit_ks";
    /// sys_enter_futex_waitv (5.16 on).
    pub const FUTEX_WAITV_ENTER: &str = "futex_waitv_enter";
    /// The configuration global.
    pub const LOCK_CONFIG: &str = "LOCK_CONFIG";
    /// `HashMap<u32, PendingFutex>`.
    pub const FUTEX_PENDING: &str = "FUTEX_PENDING";
    /// `HashMap<u64, LockStat>`.
    pub const LOCK_STATS: &str = "LOCK_STATS";
    /// `HashMap<WaiterKey, WaiterStat>`.
    pub const LOCK_WAITERS: &str = "LOCK_WAITERS";
    /// `HashMap<WakerKey, WakerStat>`.
    pub const LOCK_WAKERS: &str = "LOCK_WAKERS";
    /// User stacks of wakers, `StackTraceMap`.
    pub const USER_STACKS: &str = "USER_STACKS";
    /// Scratch for one [`super::LockStat`] (too big for the BPF stack).
    pub const LOCK_SCRATCH: &str = "LOCK_SCRATCH";
}

/// The log2 bucket of a duration (see [`HIST_BUCKETS`]): branches only,
/// so the verifier sees a bounded result.
#[inline(always)]
pub fn log2_bucket(ns: u64) -> usize {
    if ns == 0 {
        return 0;
    }
    let r = crate::log2(ns) as usize + 1;
    if r >= HIST_BUCKETS {
        HIST_BUCKETS - 1
    } else {
        r
    }
}

const _: () = {
    assert!(core::mem::size_of::<LockStat>() == 5 * 8 + HIST_BUCKETS * 8);
    assert!(core::mem::size_of::<WakerStat>() == 4 * 8 + WAKER_STACK_WORDS * 8);
};

#[cfg(feature = "user")]
mod pod {
    // SAFETY: #[repr(C)] structs of integers with explicit padding: every
    // bit pattern is a valid value.
    unsafe impl aya::Pod for super::LockConfig {}
    // SAFETY: as above.
    unsafe impl aya::Pod for super::PendingFutex {}
    // SAFETY: as above.
    unsafe impl aya::Pod for super::LockStat {}
    // SAFETY: as above.
    unsafe impl aya::Pod for super::WaiterKey {}
    // SAFETY: as above.
    unsafe impl aya::Pod for super::WaiterStat {}
    // SAFETY: as above.
    unsafe impl aya::Pod for super::WakerKey {}
    // SAFETY: as above.
    unsafe impl aya::Pod for super::WakerStat {}
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_are_log2() {
        assert_eq!(log2_bucket(0), 0);
        assert_eq!(log2_bucket(1), 1);
        assert_eq!(log2_bucket(2), 2);
        assert_eq!(log2_bucket(3), 2);
        assert_eq!(log2_bucket(4), 3);
        assert_eq!(log2_bucket(1023), 10);
        assert_eq!(log2_bucket(1024), 11);
        assert_eq!(log2_bucket(1 << 62), 63);
        assert_eq!(log2_bucket(u64::MAX), 63, "the last bucket holds the rest");
    }
}
