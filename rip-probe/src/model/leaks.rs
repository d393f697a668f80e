//! `rip-probe leaks`: the resources a process acquired during a window and
//! still held at its end — heap blocks, file descriptors, mappings, SysV
//! shared memory — grouped by the stack that acquired them (sp-rtrace's
//! leak filter and backtrace compression), with totals over time.
//! Documented in docs/JSON.md with the rest of the model.
//!
//! The same report is made from the kernel's view of a live process
//! (syscall tracepoints, allocator uprobes) and from the allocations a
//! ring file kept: the fields say what was traced, and a part that was
//! not is absent rather than zero.

use std::sync::Arc;

use schemars::JsonSchema;
use serde::Serialize;

use super::{Frame, ProcessInfo};

/// The report of `rip-probe leaks`.
#[derive(Clone, Debug, Serialize, JsonSchema)]
pub struct LeaksReport {
    /// [`super::SCHEMA_VERSION`].
    pub schema: u32,
    /// The process observed.
    pub process: ProcessInfo,
    /// How long it was observed, in ns (shorter than asked when the
    /// process exited).
    pub window_ns: u64,
    /// Resources younger than this at the window's end (ns) are left out:
    /// still in use rather than leaked.
    pub min_age_ns: u64,
    /// What was traced, and what was not and why.
    pub traced: LeakTracing,
    /// Descriptors open when the window began (from /proc/PID/fd): not
    /// acquired in the window, so left out of the report. `None` when the
    /// descriptor table could not be read.
    pub open_at_start: Option<u64>,
    /// Outstanding at the end, older than `min_age_ns`, by kind.
    pub totals: Vec<LeakTotal>,
    /// Acquired during the window and released before its end (filtered
    /// out), by kind.
    pub released: Vec<LeakTotal>,
    /// The outstanding resources grouped by kind and acquiring stack, most
    /// bytes first (then most resources).
    pub stacks: Vec<LeakStack>,
    /// Everything acquired in the window by kind, call and acquiring
    /// stack, released since or not, most bytes first (then most
    /// resources): pprof's `alloc_objects` and `alloc_space`. Only with
    /// `--pprof` (each heap block's stack is then unwound, even of the
    /// blocks freed at once), otherwise `None`; not subject to
    /// `min_age_ns`.
    pub allocated: Option<Vec<LeakAcquired>>,
    /// Outstanding totals over the window, oldest first: what was acquired
    /// in the window and not yet released at each point.
    pub series: Vec<LeakPoint>,
    /// Events the kernel could not hand over (its buffer or tables were
    /// full): the report is then a lower bound, or may hold releases
    /// never seen as leaks. Never silent: also said in `warnings`.
    pub lost: LeakLost,
    /// Things to know: the process exited, events were lost, parts not
    /// traced.
    pub warnings: Vec<String>,
    /// When the heap comes from librip's allocation sampler (`leaks RING`,
    /// `leaks --pid N --sampled`) rather than a traced window: what it
    /// kept. Then `window_ns` is 0 (one reading), the heap's stacks count
    /// live samples, and their bytes are estimates unless every call was
    /// recorded.
    pub sampler: Option<HeapSampler>,
}

/// What librip's allocation sampler kept in a ring, read once.
#[derive(Clone, Debug, Serialize, JsonSchema)]
pub struct HeapSampler {
    /// The ring file.
    pub ring: String,
    /// The sampling mean in bytes; 1: every allocation was recorded, and
    /// counts and bytes are exact.
    pub mean_bytes: u64,
    /// The heap's bytes are estimates (`mean_bytes` > 1): each live sample
    /// of `s` bytes stands for `s / (1 - exp(-s/mean))`.
    pub estimated: bool,
    /// Allocations sampled since the ring was made.
    pub sampled: u64,
    /// Of those, freed since.
    pub freed: u64,
    /// Sampled allocations the full table could not hold (the live
    /// totals are then lower bounds).
    pub dropped: u64,
    /// Entries found half-written (a writer killed mid-record), left out.
    pub torn: u32,
    /// Sampled allocations live when the ring was read.
    pub live_samples: u64,
    /// Their requested bytes.
    pub sampled_bytes: u64,
}

/// Which resources were traced.
#[derive(Clone, Debug, Default, Serialize, JsonSchema)]
pub struct LeakTracing {
    /// File descriptors (open, socket, pipe, dup, ... and close), from
    /// syscall tracepoints.
    pub descriptors: bool,
    /// Mappings (mmap, munmap, mremap, brk), from syscall tracepoints.
    pub mappings: bool,
    /// SysV shared memory attachments (shmat, shmdt).
    pub shm: bool,
    /// The heap: `None` when it was not traced (`--no-heap`, or no
    /// allocator found; `warnings` says which).
    pub heap: Option<HeapTracing>,
}

/// How the heap was traced.
#[derive(Clone, Debug, Default, Serialize, JsonSchema)]
pub struct HeapTracing {
    /// The allocator's library or binary, as the process maps it.
    pub allocator: String,
    /// Which allocator: `glibc`, `jemalloc`, `tcmalloc`, `mimalloc`, or
    /// `the executable's own` (a static binary, or one that defines
    /// malloc itself).
    pub name: String,
    /// The functions probed (`malloc`, `free`, ...).
    pub functions: Vec<String>,
    /// Allocator calls seen during the window.
    pub calls: u64,
    /// Allocator calls per second measured just before the window (its
    /// probes counting only): what the tracing was said to cost.
    pub calls_per_s_before: f64,
    /// Frees of blocks allocated before the window (not in the report).
    pub older_frees: u64,
}

/// What a resource is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ResourceKind {
    /// A heap block (malloc and its family).
    Heap,
    /// A file descriptor.
    Fd,
    /// A memory mapping (mmap, mremap), or heap grown by brk.
    Mapping,
    /// An attached SysV shared memory segment.
    Shm,
}

impl ResourceKind {
    /// The kind's name in text.
    pub fn name(self) -> &'static str {
        match self {
            ResourceKind::Heap => "heap",
            ResourceKind::Fd => "descriptors",
            ResourceKind::Mapping => "mappings",
            ResourceKind::Shm => "shm",
        }
    }
}

/// What a file descriptor refers to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum FdKind {
    /// A file or directory.
    File,
    /// A socket.
    Socket,
    /// A pipe (or FIFO).
    Pipe,
    /// An eventfd.
    Eventfd,
    /// An epoll instance.
    Epoll,
    /// A memfd.
    Memfd,
    /// A timerfd.
    Timerfd,
    /// A signalfd.
    Signalfd,
    /// An inotify instance.
    Inotify,
    /// A pidfd.
    Pidfd,
    /// A device.
    Device,
    /// Another anonymous inode, or closed again by the time it was looked
    /// at (then only the syscall tells).
    Other,
}

impl FdKind {
    /// The kind's name in text.
    pub fn name(self) -> &'static str {
        match self {
            FdKind::File => "file",
            FdKind::Socket => "socket",
            FdKind::Pipe => "pipe",
            FdKind::Eventfd => "eventfd",
            FdKind::Epoll => "epoll",
            FdKind::Memfd => "memfd",
            FdKind::Timerfd => "timerfd",
            FdKind::Signalfd => "signalfd",
            FdKind::Inotify => "inotify",
            FdKind::Pidfd => "pidfd",
            FdKind::Device => "device",
            FdKind::Other => "other",
        }
    }
}

/// A count of resources and their bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, JsonSchema)]
pub struct LeakTotal {
    /// The kind.
    pub kind: ResourceKind,
    /// Resources.
    pub count: u64,
    /// Their bytes (0 for descriptors).
    pub bytes: u64,
}

/// The outstanding resources of one kind acquired under one stack.
#[derive(Clone, Debug, Serialize, JsonSchema)]
pub struct LeakStack {
    /// The kind.
    pub kind: ResourceKind,
    /// For descriptors: what they refer to.
    pub fd_kind: Option<FdKind>,
    /// The call that acquired them (`malloc`, `openat`, `mmap`, ...).
    pub call: String,
    /// Resources still held.
    pub count: u64,
    /// Their bytes (0 for descriptors).
    pub bytes: u64,
    /// Age of the oldest at the window's end, ns.
    pub oldest_ns: u64,
    /// A few of them: descriptor numbers, or block and mapping addresses.
    pub ids: Vec<u64>,
    /// A few of the descriptors' targets (`/proc/PID/fd` links) at the
    /// end, when readable.
    pub targets: Vec<String>,
    /// The acquiring user stack as return addresses, innermost first.
    pub addrs: Vec<u64>,
    /// The same stack, named.
    pub frames: Arc<[Frame]>,
}

/// What was acquired in the window under one stack, released since or
/// not.
#[derive(Clone, Debug, Serialize, JsonSchema)]
pub struct LeakAcquired {
    /// The kind.
    pub kind: ResourceKind,
    /// The call that acquired them (`malloc`, `openat`, `mmap`, ...).
    pub call: String,
    /// Resources acquired.
    pub count: u64,
    /// Their bytes (0 for descriptors and shm).
    pub bytes: u64,
    /// The acquiring user stack as return addresses, innermost first.
    pub addrs: Vec<u64>,
    /// The same stack, named.
    pub frames: Arc<[Frame]>,
}

/// Outstanding totals at one point of the window.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, JsonSchema)]
pub struct LeakPoint {
    /// ns since the window began.
    pub at_ns: u64,
    /// Heap blocks acquired in the window and not yet freed.
    pub heap_count: u64,
    /// Their bytes.
    pub heap_bytes: u64,
    /// Descriptors opened in the window and not yet closed.
    pub descriptors: u64,
    /// Mappings made in the window and not yet unmapped.
    pub mappings: u64,
    /// Their bytes.
    pub mapped_bytes: u64,
    /// Heap calls (allocations and frees) since the previous point.
    pub heap_calls: u64,
}

/// Events lost to full kernel buffers or tables.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, JsonSchema)]
pub struct LeakLost {
    /// Events dropped because the ring buffer to user space was full.
    pub events: u64,
    /// Calls whose start could not be remembered (table of calls in
    /// flight full): their result was never seen.
    pub calls: u64,
    /// Releases of resources never seen acquired in the window (acquired
    /// before it, or their acquisition was lost): ignored.
    pub unmatched_releases: u64,
    /// Allocations whose block was not seen: the table of allocator calls
    /// in flight was full, or the return matched no entry (an allocator
    /// call nested in another of the same thread).
    pub heap_calls: u64,
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A report of nothing, for tests to fill.
    pub(crate) fn empty_report() -> LeaksReport {
        LeaksReport {
            schema: crate::model::SCHEMA_VERSION,
            process: ProcessInfo {
                pid: 1,
                exe: None,
                comm: None,
                alive: true,
                lost: None,
                ns_pid: None,
                title: None,
            },
            window_ns: 0,
            min_age_ns: 0,
            traced: LeakTracing::default(),
            open_at_start: None,
            totals: Vec::new(),
            released: Vec::new(),
            stacks: Vec::new(),
            allocated: None,
            series: Vec::new(),
            lost: LeakLost::default(),
            warnings: Vec::new(),
            sampler: None,
        }
    }
}
