//! The user-space side of collection: a process's librip ring file, read
//! with librip's reader (which copies the shared memory with atomic loads
//! and validates every offset) and turned into the few facts rip-probe
//! joins with the kernel's view.

pub(crate) mod follow;
mod namespaced;
mod read;

pub(crate) use follow::{Followed, SnapFollower};

use std::path::PathBuf;

/// One executable mapping of the traced process, as its ring recorded it.
#[derive(Clone, Debug)]
pub struct ModuleMap {
    /// Path of the mapped file.
    pub path: PathBuf,
    /// First mapped address.
    pub start: u64,
    /// One past the last mapped address.
    pub end: u64,
    /// File offset mapped at `start`.
    pub file_offset: u64,
    /// GNU build-id of the file when it was mapped.
    pub build_id: Option<Vec<u8>>,
    /// The root `path` is resolved in: `/proc/PID/root` for a process in
    /// another mount namespace, a container's root file system
    /// (`dump --root`); `None`: ours.
    pub root: Option<PathBuf>,
}

/// One slot of a ring: a thread or a coroutine.
#[derive(Clone, Debug)]
pub struct RingSlot {
    /// Thread (`false`) or coroutine/task (`true`).
    pub coroutine: bool,
    /// Marked exited by the program.
    pub exited: bool,
    /// Thread id, or coroutine id. A thread's is ours once
    /// [`RingView::map_tids_to_ours`] mapped it; before, and for a thread it
    /// could not map, the id of the writer's pid namespace.
    pub id: u64,
    /// The id the writer's pid namespace gives the thread, when that
    /// namespace is not ours.
    pub ns_id: Option<u64>,
    /// Distinguishes reuses of a coroutine slot.
    pub generation: u32,
    /// Name given at registration.
    pub name: String,
    /// Total snaps.
    pub snaps: u64,
    /// `(seq, address)`, oldest first.
    pub entries: Vec<(u64, u64)>,
    /// Poll statistics of an async task.
    pub task: Option<TaskStats>,
}

/// Poll statistics of a task slot, as librip's reader returns them.
pub use librip::reader::TaskStats;

/// What a ring file says, copied out of it.
#[derive(Clone, Debug)]
pub struct RingView {
    /// Path of the file.
    pub path: PathBuf,
    /// The file's owner: whose word the ring is.
    pub owner: u32,
    /// Layout version.
    pub version: u32,
    /// Pid that created it, in its own pid namespace.
    pub pid: u32,
    /// Inode of the writer's pid namespace (0: not recorded).
    pub pid_ns: u64,
    /// Inode of the writer's mount namespace (0: not recorded).
    pub mnt_ns: u64,
    /// Set when the ring was reached through another process's view of the
    /// files (its mount namespace): which, and how. `path` is then the
    /// path that process sees.
    pub ns_note: Option<String>,
    /// The creating process's start time (clock ticks since boot), to
    /// recognise pid reuse.
    pub process_start_time: u64,
    /// Executable of that process.
    pub exe: Option<String>,
    /// Creation time, ns since the Unix epoch.
    pub created_unix_ns: u64,
    /// Creation time on CLOCK_MONOTONIC, ns.
    pub created_monotonic_ns: u64,
    /// Entries kept per slot.
    pub depth: u32,
    /// Snaps dropped because their thread had no slot (a lower bound).
    pub dropped: u64,
    /// Executable mappings at creation (and as refreshed by the writer).
    pub modules: Vec<ModuleMap>,
    /// Non-free slots.
    pub slots: Vec<RingSlot>,
    /// The allocation sampler's table (librip::alloc), when the writer sampled.
    pub allocations: Option<AllocEvidence>,
}

/// What the allocation sampler's table held when it was read: the live
/// samples, each already weighed by librip's estimator.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct AllocEvidence {
    /// The sampling mean in bytes (1: every allocation was recorded).
    pub mean: u64,
    /// Allocations recorded since the ring was made.
    pub sampled: u64,
    /// Of those, freed since.
    pub freed: u64,
    /// Samples the full table could not hold.
    pub dropped: u64,
    /// Whether the ring's file system was full: then `dropped` counts
    /// samples that found no room in the file, not in the table.
    pub file_full: bool,
    /// Entries found half-written, left out.
    pub torn: u32,
    /// The live samples.
    pub live: Vec<LiveSample>,
}

/// One live sampled allocation.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct LiveSample {
    /// Bytes asked for.
    pub requested: u64,
    /// The bytes it stands for (`librip::reader::alloc::estimated_bytes`).
    pub estimated_bytes: f64,
    /// When it was allocated (the writer's CLOCK_MONOTONIC, ns).
    pub time_ns: u64,
    /// Return addresses, the allocator's caller first.
    pub frames: Vec<u64>,
}

impl RingView {
    /// A CLOCK_MONOTONIC time of the ring's writer as wall-clock time (ns
    /// since the Unix epoch), through the clock pair taken at creation.
    pub fn unix_ns(&self, monotonic_ns: u64) -> u64 {
        let since = monotonic_ns.wrapping_sub(self.created_monotonic_ns) as i64;
        self.created_unix_ns.saturating_add_signed(since)
    }
}

#[cfg(test)]
impl RingView {
    /// A ring of pid 1 (no namespaces recorded, no modules) holding `slots`.
    pub(crate) fn with_slots(slots: Vec<RingSlot>) -> RingView {
        RingView {
            path: "/dev/shm/t.ring".into(),
            owner: 0,
            version: 1,
            pid: 1,
            pid_ns: 0,
            mnt_ns: 0,
            ns_note: None,
            process_start_time: 0,
            exe: None,
            created_unix_ns: 0,
            created_monotonic_ns: 0,
            depth: 32,
            dropped: 0,
            modules: Vec::new(),
            slots,
            allocations: None,
        }
    }
}
