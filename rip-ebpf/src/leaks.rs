//! Types shared by the leak-tracing programs (`leaks_enter`,
//! `leaks_exit`) and `rip-probe leaks`.
//!
//! The programs see every syscall of the target on raw_syscalls'
//! sys_enter and sys_exit. User space marks the syscalls it wants in
//! [`LEAK_CALLS`](names::LEAK_CALLS) (by number: acquisitions, which get a
//! copy of the user stack, and releases, which do not); for those, the
//! enter program keeps the arguments by thread, and the exit program sends
//! one [`LeakEvent`] with the result through
//! [`LEAK_EVENTS`](names::LEAK_EVENTS). User space unwinds the copies with
//! the binaries' CFI, and keeps the table of what is outstanding.

/// Bytes of user stack copied per acquisition: deeper frames are not
/// unwound.
pub const LEAK_STACK: usize = 8192;

/// Syscall numbers [`LEAK_CALLS`](names::LEAK_CALLS) covers.
pub const MAX_SYSCALL: u32 = 512;

/// [`LEAK_CALLS`](names::LEAK_CALLS) values.
pub mod call {
    /// Not traced.
    pub const NONE: u8 = 0;
    /// An acquisition: the event carries a copy of the user stack.
    pub const ACQUIRE: u8 = 1;
    /// A release (close, munmap, shmdt): no stack.
    pub const RELEASE: u8 = 2;
}

/// Tracepoint record offsets, from tracefs's format files, written into
/// the `LEAK_CONFIG` global.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LeakConfig {
    /// `id` in raw_syscalls:sys_enter.
    pub enter_id_off: u32,
    /// `args` in raw_syscalls:sys_enter.
    pub enter_args_off: u32,
    /// `id` in raw_syscalls:sys_exit.
    pub exit_id_off: u32,
    /// `ret` in raw_syscalls:sys_exit.
    pub exit_ret_off: u32,
}

/// A traced syscall in flight, by thread.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LeakCall {
    /// The syscall number.
    pub nr: u64,
    /// Its arguments.
    pub args: [u64; 6],
}

/// One traced syscall that succeeded, sent at its exit: a release as it
/// is, an acquisition followed by its stack copy ([`LeakAcquire`]).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "user", derive(zerocopy::FromBytes))]
pub struct LeakEvent {
    /// CLOCK_MONOTONIC ns at the exit.
    pub ts_ns: u64,
    /// The syscall number.
    pub nr: u64,
    /// Its arguments.
    pub args: [u64; 6],
    /// Its result.
    pub ret: i64,
    /// User registers at the call (for the unwinder).
    pub ip: u64,
    /// User stack pointer.
    pub sp: u64,
    /// User `rbp`.
    pub bp: u64,
    /// The two descriptors pipe, pipe2 and socketpair wrote (read at the
    /// exit from the array their argument points at).
    pub fds: [i32; 2],
    /// The thread.
    pub tid: u32,
    /// Bytes of the stack copied after it (0 for releases, or an
    /// unreadable stack).
    pub len: u32,
}

/// An acquisition: the event and a copy of the user stack, from `sp` up.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LeakAcquire {
    /// The event.
    pub ev: LeakEvent,
    /// The stack; `ev.len` bytes of it copied.
    pub bytes: [u8; LEAK_STACK],
}

/// Counters of the leak programs, per CPU.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LeakStats {
    /// Events sent.
    pub sent: u64,
    /// Events dropped: the ring buffer was full.
    pub dropped: u64,
    /// Calls not remembered at their entry: the table was full.
    pub calls_full: u64,
    /// Traced calls that failed (nothing acquired or released).
    pub failed: u64,
    /// Allocator calls seen by the heap entry probe (counted also while
    /// [`HEAP_ON`](names::HEAP_ON) is off: the cost estimate's rate).
    pub heap_calls: u64,
    /// Allocations whose entry could not be remembered (table of heap
    /// calls in flight full): their block was never seen.
    pub heap_full: u64,
    /// Returns of allocations that matched no entry (entered before the
    /// probes were on, or nested in another allocator call of the same
    /// thread): their block was never seen.
    pub heap_unmatched: u64,
}

impl LeakStats {
    /// Adds another CPU's counters.
    pub fn merge(&mut self, o: &LeakStats) {
        self.sent += o.sent;
        self.dropped += o.dropped;
        self.calls_full += o.calls_full;
        self.failed += o.failed;
        self.heap_calls += o.heap_calls;
        self.heap_full += o.heap_full;
        self.heap_unmatched += o.heap_unmatched;
    }
}

/// The allocator's functions, as [`LeakEvent::nr`] gives them past the
/// syscalls ([`heap::BASE`] + one of these), and as
/// [`HEAP_FNS`](names::HEAP_FNS) names each probed address.
///
/// For heap events `args` holds the call's first three arguments and
/// `ret` the block: the function's result, or what `posix_memalign` wrote
/// through its first argument. `free` is sent at its entry, without a
/// stack (before the block can be reused); the others at their return,
/// with the caller's stack.
pub mod heap {
    /// `LeakEvent::nr` of heap events is this plus the function.
    pub const BASE: u64 = 0x1_0000;
    /// `malloc(size)`.
    pub const MALLOC: u32 = 1;
    /// `calloc(n, size)`.
    pub const CALLOC: u32 = 2;
    /// `realloc(old, size)`: releases `old`, acquires the result.
    pub const REALLOC: u32 = 3;
    /// `free(block)`.
    pub const FREE: u32 = 4;
    /// `posix_memalign(&block, align, size)`.
    pub const POSIX_MEMALIGN: u32 = 5;
    /// `aligned_alloc(align, size)`.
    pub const ALIGNED_ALLOC: u32 = 6;
    /// `memalign(align, size)`.
    pub const MEMALIGN: u32 = 7;
    /// `valloc(size)`.
    pub const VALLOC: u32 = 8;
    /// `pvalloc(size)`.
    pub const PVALLOC: u32 = 9;
    /// `reallocarray(old, n, size)`: as `realloc`.
    pub const REALLOCARRAY: u32 = 10;
}

/// An allocator call in flight, by thread.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct HeapCall {
    /// One of [`heap`]'s functions.
    pub func: u32,
    /// Padding.
    pub _pad: u32,
    /// The stack pointer at entry: the return finds it 8 bytes higher.
    pub sp: u64,
    /// The first three arguments.
    pub args: [u64; 3],
}

/// Names of the programs, maps and globals.
pub mod names {
    /// raw_syscalls:sys_enter: remembers a traced call's arguments.
    pub const LEAKS_ENTER: &str = "leaks_enter";
    /// raw_syscalls:sys_exit with `bpf_task_pt_regs`.
    pub const LEAKS_EXIT: &str = "leaks_exit";
    /// The same for kernels before 5.15.
    pub const LEAKS_EXIT_KSTACK: &str = "leaks_exit_kstack";
    /// The global [`super::LeakConfig`].
    pub const LEAK_CONFIG: &str = "LEAK_CONFIG";
    /// `Array<u8>` by syscall number: [`super::call`].
    pub const LEAK_CALLS: &str = "LEAK_CALLS";
    /// `HashMap<u32, LeakCall>`: calls in flight by thread.
    pub const LEAK_IN_FLIGHT: &str = "LEAK_IN_FLIGHT";
    /// `RingBuf` of [`super::LeakEvent`].
    pub const LEAK_EVENTS: &str = "LEAK_EVENTS";
    /// `PerCpuArray<LeakStats>` of one entry.
    pub const LEAK_STATS: &str = "LEAK_STATS";
    /// Uprobe at the entry of each allocator function.
    pub const HEAP_ENTRY: &str = "heap_entry";
    /// Uretprobe at the return of each allocating function.
    pub const HEAP_RETURN: &str = "heap_return";
    /// `HashMap<u64, u32>`: probed runtime address to [`super::heap`]
    /// function.
    pub const HEAP_FNS: &str = "HEAP_FNS";
    /// `HashMap<u32, HeapCall>`: allocator calls in flight by thread.
    pub const HEAP_IN_FLIGHT: &str = "HEAP_IN_FLIGHT";
    /// `Array<u32>` of one entry: 1 once the window begins (before, the
    /// heap probes only count calls).
    pub const HEAP_ON: &str = "HEAP_ON";
}

#[cfg(feature = "user")]
mod pod {
    // SAFETY: #[repr(C)] structs of integers with explicit padding: every
    // bit pattern is a valid value.
    unsafe impl aya::Pod for super::LeakConfig {}
    // SAFETY: as above.
    unsafe impl aya::Pod for super::LeakCall {}
    // SAFETY: as above.
    unsafe impl aya::Pod for super::LeakStats {}
    // SAFETY: as above.
    unsafe impl aya::Pod for super::HeapCall {}
}
