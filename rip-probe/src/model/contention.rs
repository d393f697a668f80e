//! The report of `rip-probe locks`: futex contention over a window, per
//! lock. Rendered as text and JSON from these structs alone.

use schemars::JsonSchema;
use serde::Serialize;

use super::{Bucket, Frame, LockKind, MutexFlavor, ProcessInfo};

/// `rip-probe locks --pid N --duration D`: which locks the process's
/// threads waited for, how long, who waited and who woke them.
#[derive(Clone, Debug, Serialize, JsonSchema)]
pub struct LocksReport {
    /// [`super::SCHEMA_VERSION`].
    pub schema: u32,
    /// The process.
    pub process: ProcessInfo,
    /// How long contention was counted, in ns (shorter than asked when the
    /// process exited).
    pub window_ns: u64,
    /// Contended locks, longest total wait first, then the idle waits
    /// (`idle`), longest total wait first.
    pub locks: Vec<LockContention>,
    /// Things to know: the process exiting during the window, a full table.
    pub warnings: Vec<String>,
}

/// One contended lock (one futex word) over the window.
#[derive(Clone, Debug, Serialize, JsonSchema)]
pub struct LockContention {
    /// Address of the futex word threads waited on.
    pub futex: u64,
    /// Address of the lock holding it (the mutex, rwlock or condition
    /// variable), where its layout was recognised; else the futex word.
    pub lock: u64,
    /// The lock's name: its data symbol, or the memory it lives in.
    pub symbol: Option<String>,
    /// What the lock is, read from its memory at the end of the window.
    pub kind: LockKind,
    /// A glibc mutex's flavour.
    pub mutex: Option<MutexFlavor>,
    /// Idle waits, not contention: threads waiting to be signalled (a
    /// condition variable), or waits that all ended with nobody waking
    /// the word (their timeouts expired: a pool polling for work). Listed
    /// after the contended locks.
    pub idle: bool,
    /// Waits that slept (a waiter that found the word changed and did not
    /// sleep is not counted).
    pub waits: u64,
    /// Threads woken through this futex word.
    pub wakes: u64,
    /// Sum of the waits, ns.
    pub total_wait_ns: u64,
    /// Longest wait, ns.
    pub max_wait_ns: u64,
    /// 99th percentile of the waits, ns: the upper bound of the histogram
    /// bucket holding it, at most `max_wait_ns`.
    pub p99_wait_ns: u64,
    /// Waits per log2 bucket of their duration, non-empty buckets from the
    /// first to the last (empty ones between included).
    pub histogram: Vec<Bucket>,
    /// The threads that waited longest in total, at most five.
    pub top_waiters: Vec<LockWaiter>,
    /// Where the threads that woke waiters were, most wakes first, at most
    /// five call stacks.
    pub wakers: Vec<LockWaker>,
}

/// A thread that waited for a lock.
#[derive(Clone, Debug, Serialize, JsonSchema)]
pub struct LockWaiter {
    /// Thread id.
    pub tid: u32,
    /// Its name (comm), when it is still alive.
    pub name: Option<String>,
    /// Waits that slept.
    pub waits: u64,
    /// Their total, ns.
    pub total_wait_ns: u64,
    /// The longest, ns.
    pub max_wait_ns: u64,
}

/// A place threads woke waiters of a lock from: the holder releasing it.
#[derive(Clone, Debug, Serialize, JsonSchema)]
pub struct LockWaker {
    /// Threads woken from here.
    pub wakes: u64,
    /// Wake calls that woke at least one.
    pub calls: u64,
    /// The last thread that woke from here.
    pub tid: u32,
    /// The first frame outside the C library and the dynamic loader: the
    /// code that released the lock.
    pub location: Option<Frame>,
    /// The waker's user stack, innermost first (the futex call first).
    pub stack: Vec<Frame>,
}
