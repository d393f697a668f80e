//! Types shared between rip's eBPF programs and user space.
//!
//! Every type here is `#[repr(C)]`, made of fixed-size integers and padded by
//! hand, so the BPF program (compiled for `bpfel-unknown-none`) and the
//! loader (x86-64) agree on its layout byte for byte. With the `user`
//! feature they implement [`aya::Pod`] so user space can read them out of
//! maps and ring buffers.
#![no_std]

pub mod calls;
pub mod contention;
pub mod futex_ops;
pub mod leaks;
pub mod offcpu;

/// `floor(log2(v))` for `v > 0`, by halving steps: BPF has no
/// count-leading-zeros instruction. Shared by the latency histograms of
/// `calls` and `locks`.
#[inline(always)]
pub fn log2(mut v: u64) -> u64 {
    let mut k = 0;
    for shift in [32, 16, 8, 4, 2, 1] {
        if v >> shift != 0 {
            v >>= shift;
            k += shift;
        }
    }
    k
}

/// Kernel type offsets and target selection, written into the program's
/// `CONFIG` global by the loader before the program is loaded.
///
/// Offsets are read at run time from the kernel's BTF (`struct pt_regs`,
/// `struct task_struct`): Rust eBPF has no CO-RE relocations, so nothing
/// about kernel layouts is compiled in. (sched_switch is a raw tracepoint:
/// its arguments are the tasks themselves, with no record layout.)
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Config {
    /// Thread group id (process id) whose threads are observed.
    pub target_tgid: u32,
    /// Offsets of the saved user registers in `struct pt_regs`.
    pub regs: PtRegsOffsets,
    /// Offsets of the `task_struct` members the task iterator reads.
    pub task: TaskOffsets,
    /// 1: send every switch of the target, with its kernel stack and user
    /// registers, through `EVENTS` (for observers); 0: only keep `THREADS`
    /// up to date (times and states), which costs a switch far less.
    pub emit_events: u32,
    /// What the task iterator does about pid namespaces: one of
    /// [`pid_ns`]'s constants.
    pub pid_ns: u32,
    /// 1: the kernel's sched_switch tracepoint passes `prev_state` as its
    /// fourth argument (5.18 on), which says how `prev` left the CPU
    /// where its own state may already be a waker's; 0: read `prev`'s.
    pub switch_state_arg: u32,
    /// The per-thread records are in the `SLOTS` array, whose size is
    /// this plus one (a power of two), rather than in the `THREADS` hash
    /// map: 0 for the raw tracepoint programs, which keep the hash map.
    pub slot_mask: u32,
    /// 1: the BTF-typed sched_switch program stamps a switch with the
    /// switching CPU's scheduler clock (`rq->clock`, just updated by
    /// `__schedule`) placed on CLOCK_MONOTONIC by that CPU's offset from
    /// `bpf_ktime_get_ns`, read again at most every
    /// [`CLOCK_RESYNC_NS`]; 0: `bpf_ktime_get_ns` at every switch (the
    /// raw programs; kernels without `se.cfs_rq`).
    pub switch_clock: u32,
}

/// How long (ns of the scheduler's clock) a CPU's offset between its
/// scheduler clock and CLOCK_MONOTONIC is used before
/// `bpf_ktime_get_ns` is read again (see [`Config::switch_clock`]).
pub const CLOCK_RESYNC_NS: u64 = 1_000_000;

/// Readings of both clocks per offset: the offset used is the smallest of
/// this many (see [`ClockSync`]).
pub const CLOCK_READINGS: u32 = 8;

/// A CPU's offset between its scheduler clock and CLOCK_MONOTONIC, as the
/// switch program reads it (see [`Config::switch_clock`]).
///
/// Each reading (`bpf_ktime_get_ns` at the tracepoint minus `rq->clock`,
/// which `__schedule` updated before it) exceeds the true offset by the
/// time that `__schedule` took in between: the smallest of
/// [`CLOCK_READINGS`] readings is the one least late.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ClockSync {
    /// The scheduler clock (`rq->clock`) at the last reading; 0: not yet
    /// read on this CPU.
    pub rq_ns: u64,
    /// CLOCK_MONOTONIC minus the scheduler clock: the offset in use
    /// (wrapping).
    pub offset: u64,
    /// The smallest reading since `offset` was last replaced.
    pub least: u64,
    /// Readings since `offset` was last replaced.
    pub readings: u32,
    /// Explicit padding.
    pub _pad: u32,
}

/// [`Config::pid_ns`]: the ids rip-probe sees when it runs in a pid
/// namespace other than the host's (a debug container sharing the
/// target's). BPF always sees the kernel's global ids; /proc and the user
/// see the namespace's.
pub mod pid_ns {
    /// rip-probe runs in the host's pid namespace: global ids are its ids
    /// ([`super::TaskRecord::ns_tid`] is the global tid).
    pub const HOST: u32 = 0;
    /// Record each task's ids in rip-probe's pid namespace beside the
    /// global ones; `target_tgid` is global.
    pub const RECORD: u32 = 1;
    /// As [`RECORD`], but `target_tgid` is the target's pid in rip-probe's
    /// namespace: the pass that learns its global ids.
    pub const FIND: u32 = 2;
}

/// Byte offsets of `task_struct` members, from BTF.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[cfg_attr(
    feature = "user",
    derive(zerocopy::FromBytes, zerocopy::IntoBytes, zerocopy::Immutable)
)]
pub struct TaskOffsets {
    /// `pid` (the thread id).
    pub pid: u32,
    /// `tgid` (the process id).
    pub tgid: u32,
    /// `__state` (`state` before 5.14; TASK_* bits, 0 = running or
    /// runnable). Read as 32 bits: the older `long` holds the same bits in
    /// its low half on little-endian x86-64.
    pub state: u32,
    /// `on_cpu`: 1 while running on a CPU.
    pub on_cpu: u32,
    /// `on_rq`: non-zero while on a run queue (runnable).
    pub on_rq: u32,
    /// `comm`: the 16-byte thread name.
    pub comm: u32,
    /// `se.exec_start`: run-queue task clock (ns) when the thread last
    /// started or stopped running.
    pub exec_start: u32,
    /// `se.sum_exec_runtime`: CPU time consumed (ns).
    pub sum_exec_runtime: u32,
    /// `stack`: the task's kernel stack, whose top holds the saved user
    /// registers. Read only by the programs for kernels without
    /// `bpf_task_pt_regs` (before 5.15).
    pub stack: u32,
    /// `thread_pid`: the task's `struct pid`, which holds its id in each
    /// pid namespace it is in.
    pub thread_pid: u32,
    /// `group_leader`: the thread group's leader, whose ids are the
    /// process's.
    pub group_leader: u32,
    /// `struct pid`'s `level`: the depth of the task's innermost pid
    /// namespace (0: the host's).
    pub pid_level: u32,
    /// `struct pid`'s `numbers`: one `struct upid` per level.
    pub pid_numbers: u32,
    /// `sizeof(struct upid)`.
    pub upid_size: u32,
    /// `struct upid`'s `nr`: the id at that level.
    pub upid_nr: u32,
    /// `struct upid`'s `ns`: the `struct pid_namespace` of that level.
    pub upid_ns: u32,
    /// `se.cfs_rq`: the CFS run queue the task is (or was last) queued on
    /// (0: the kernel has no group scheduling, and so no such member).
    pub se_cfs_rq: u32,
    /// `struct cfs_rq`'s `rq`: the CPU's run queue.
    pub cfs_rq_rq: u32,
    /// `struct rq`'s `clock_task`: the clock `se.exec_start` is stamped
    /// with, on that CPU.
    pub rq_clock_task: u32,
    /// `struct rq`'s `clock`: the scheduler's clock of that CPU, which
    /// `__schedule` updates before sched_switch fires (0 with the three
    /// above).
    pub rq_clock: u32,
    /// `start_time`: CLOCK_MONOTONIC ns when the task was created.
    pub start_time: u32,
    /// Set to 1 when the offsets above are valid.
    pub valid: u32,
}

/// The sizes a kernel stack (`THREAD_SIZE`) has on x86-64: 16 KiB, or
/// 32 KiB with KASAN. On kernels without `bpf_task_pt_regs` the programs
/// look for the user register frame at the top of each in turn and keep the
/// one whose `cs` says user mode. (FRED kernels, 6.9 on, move the frame but
/// all have the helper.)
pub const KERNEL_STACK_SIZES: [u32; 2] = [16 << 10, 32 << 10];

/// Kernel stack frames kept per task by the task iterator.
pub const TASK_STACK_DEPTH: usize = 32;

/// One thread of the target as the task iterator saw it: the state of every
/// thread at one instant, including those that blocked before rip-probe
/// attached and so never pass through sched_switch while it watches.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "user", derive(zerocopy::FromBytes))]
pub struct TaskRecord {
    /// Thread id.
    pub tid: u32,
    /// Process id.
    pub tgid: u32,
    /// `task_struct.__state`.
    pub state: u32,
    /// `task_struct.on_cpu`.
    pub on_cpu: u32,
    /// `task_struct.on_rq`.
    pub on_rq: u32,
    /// Number of valid frames in `kstack`.
    pub kstack_len: u32,
    /// Thread id in rip-probe's pid namespace (the global id when it runs
    /// in the host's; 0 when the thread is not in its namespace).
    pub ns_tid: u32,
    /// Process id in rip-probe's pid namespace, like `ns_tid`.
    pub ns_tgid: u32,
    /// `se.exec_start` (run-queue task clock, ns).
    pub exec_start: u64,
    /// `se.sum_exec_runtime` (ns).
    pub sum_exec_runtime: u64,
    /// CLOCK_MONOTONIC ns when the record was taken.
    pub now_ns: u64,
    /// `se.exec_start` of the task running the iterator (rip-probe itself,
    /// on a CPU): "now" on the run-queue task clock, at most a tick behind.
    pub cur_exec_start: u64,
    /// `clock_task` of the run queue of the task's last CPU: the same clock
    /// as its `exec_start` (0: unknown). Not updated while that CPU idles,
    /// so never ahead of "now" there.
    pub rq_clock_task: u64,
    /// `start_time`: CLOCK_MONOTONIC ns when the thread was created (0:
    /// unknown). A thread has been blocked for less than its age.
    pub start_ns: u64,
    /// The thread's `THREADS` record as the iterator found it, read right
    /// after its state: its last switch off the CPU (0: none seen).
    pub sw_off_ns: u64,
    /// Likewise, its last switch onto a CPU (0: none seen).
    pub sw_on_ns: u64,
    /// Likewise, 1 while sched_switch last saw it go onto a CPU.
    pub sw_on_cpu: u32,
    /// Explicit padding, always 0.
    pub _pad: u32,
    /// Saved user registers (syscall number and arguments).
    pub regs: UserRegs,
    /// Thread name.
    pub comm: [u8; 16],
    /// Kernel stack, innermost first.
    pub kstack: [u64; TASK_STACK_DEPTH],
}

/// One thread of the target as the lean task iterator (`task_waits`) saw
/// it: only what says whether it waits in a futex now, for the lock
/// evidence's look between a lock's two reads. A pass of these costs a
/// fraction of a [`TaskRecord`] pass: no kernel stack, no clocks, no name.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "user", derive(zerocopy::FromBytes))]
pub struct TaskWait {
    /// Thread id.
    pub tid: u32,
    /// Process id.
    pub tgid: u32,
    /// Thread id in rip-probe's pid namespace, as [`TaskRecord::ns_tid`].
    pub ns_tid: u32,
    /// Process id in rip-probe's pid namespace, as [`TaskRecord::ns_tgid`].
    pub ns_tgid: u32,
    /// `task_struct.__state`.
    pub state: u32,
    /// `task_struct.on_cpu`.
    pub on_cpu: u32,
    /// Syscall number (`orig_ax`), -1 outside a syscall.
    pub syscall_nr: i64,
    /// The syscall's first argument (a futex wait's word).
    pub arg0: u64,
}

const _: () = assert!(core::mem::size_of::<TaskWait>() == 6 * 4 + 2 * 8);

/// Byte offsets of the members of the kernel's `struct pt_regs` that carry a
/// system call's number and arguments (x86-64 syscall ABI), the user
/// instruction pointer and the user stack pointer.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[cfg_attr(
    feature = "user",
    derive(zerocopy::FromBytes, zerocopy::IntoBytes, zerocopy::Immutable)
)]
pub struct PtRegsOffsets {
    /// `orig_ax`: the syscall number, or -1 outside a syscall.
    pub orig_ax: u32,
    /// `di`, `si`, `dx`, `r10`, `r8`, `r9`: arguments 1 to 6.
    pub args: [u32; 6],
    /// `ip`: user instruction pointer.
    pub ip: u32,
    /// `sp`: user stack pointer.
    pub sp: u32,
    /// `bp`: user frame pointer, for unwinding user stacks through frame
    /// pointers where a binary has no CFI.
    pub bp: u32,
    /// `cs`: the code segment, whose low two bits are 3 in a frame saved
    /// from user mode. Checks a frame found on the kernel stack.
    pub cs: u32,
    /// `sizeof(struct pt_regs)`.
    pub size: u32,
    /// Set to 1 when the offsets above are valid; 0 disables register reads.
    pub valid: u32,
    /// Explicit padding, always 0.
    pub _pad: u32,
}

/// What a thread was doing in user space when it entered the kernel: read
/// from its saved user registers.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "user", derive(zerocopy::FromBytes))]
pub struct UserRegs {
    /// Syscall number (`orig_ax`), or -1 when the thread entered the kernel
    /// for another reason (interrupt, fault, preemption in user mode).
    pub syscall_nr: i64,
    /// The six syscall arguments.
    pub args: [u64; 6],
    /// User instruction pointer.
    pub ip: u64,
    /// User stack pointer.
    pub sp: u64,
    /// User frame pointer (`rbp`): the start of a frame-pointer walk, the
    /// unwinder's fallback where a binary has no CFI.
    pub bp: u64,
}

// Padded by hand: no implicit padding, so both sides agree on every byte.
const _: () = {
    assert!(core::mem::size_of::<UserRegs>() == 10 * 8);
    assert!(core::mem::size_of::<PtRegsOffsets>() == 14 * 4);
    assert!(core::mem::size_of::<TaskOffsets>() == 22 * 4);
    assert!(
        core::mem::size_of::<TaskRecord>()
            == 8 * 4 + 5 * 8 + 8 * 4 + 80 + 16 + TASK_STACK_DEPTH * 8
    );
};

/// Per-thread kernel state kept in the `THREADS` map, keyed by thread id.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ThreadRecord {
    /// CLOCK_MONOTONIC ns of the last switch off the CPU (0: not seen).
    pub off_cpu_ns: u64,
    /// CLOCK_MONOTONIC ns of the last switch onto the CPU (0: not seen).
    pub on_cpu_ns: u64,
    /// `prev_state` at the last switch off the CPU (see [`task_state`]).
    pub state: u64,
    /// Number of switches off the CPU observed.
    pub switches: u64,
    /// Kernel stack id in the `STACKS` map at the last switch off (<0: none;
    /// stacks are only taken when events are on).
    pub kstack_id: i64,
    /// User registers at the last switch off the CPU (only with events;
    /// `syscall_nr` is -1 otherwise).
    pub regs: UserRegs,
    /// 1 while the thread is on a CPU, 0 while it is off.
    pub on_cpu: u32,
    /// Explicit padding, always 0.
    pub _pad: u32,
}

/// One entry of the `SLOTS` array: a thread's [`ThreadRecord`] at a slot
/// of its own, found without a hash lookup.
///
/// A thread's slot is one of [`SLOT_PROBES`] in a row from its thread id's
/// low bits (the ids of one process's threads are mostly consecutive, so
/// mostly its first). A thread claims a free slot at its first switch seen
/// (an atomic compare-and-swap of `tid` from 0, Linux 5.12), else the slot of a thread
/// that has exited, whose record is then lost ([`SlotStats::reused`]);
/// with neither, its switches are not recorded ([`SlotStats::full`]).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ThreadSlot {
    /// The thread id that holds the slot (0: free). 64 bits wide: BPF's
    /// compare-and-swap is of 64-bit words here.
    pub tid: u64,
    /// Its record.
    pub rec: ThreadRecord,
}

/// Slots a thread may hold in `SLOTS`, in a row from its id's low bits.
pub const SLOT_PROBES: u32 = 4;

/// How `SLOTS` fared, per CPU (`SLOT_STATS`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SlotStats {
    /// Threads that took a free slot.
    pub claimed: u64,
    /// Threads that took the slot of an exited thread, whose record went.
    pub reused: u64,
    /// Switches not recorded: no slot was free for their thread.
    pub full: u64,
}

impl SlotStats {
    /// Adds another CPU's counts.
    pub fn merge(&mut self, o: &SlotStats) {
        self.claimed += o.claimed;
        self.reused += o.reused;
        self.full += o.full;
    }
}

/// One context switch of an observed thread, sent through the `EVENTS` ring
/// buffer to whoever observes the session.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "user", derive(zerocopy::FromBytes))]
pub struct SwitchEvent {
    /// CLOCK_MONOTONIC ns.
    pub ts_ns: u64,
    /// Thread id.
    pub tid: u32,
    /// [`SWITCH_OFF`] or [`SWITCH_ON`].
    pub kind: u32,
    /// `prev_state` for a switch off; 0 for a switch on.
    pub state: u64,
    /// Kernel stack id for a switch off (<0: none).
    pub kstack_id: i64,
    /// User registers for a switch off.
    pub regs: UserRegs,
}

/// [`SwitchEvent::kind`]: the thread left the CPU.
pub const SWITCH_OFF: u32 = 0;
/// [`SwitchEvent::kind`]: the thread got the CPU.
pub const SWITCH_ON: u32 = 1;

/// The last traced function a thread entered, kept in `LAST_FN` by the
/// uprobe program.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FnHit {
    /// Address of the probed function (the probe's instruction pointer).
    pub addr: u64,
    /// CLOCK_MONOTONIC ns of the hit.
    pub ts_ns: u64,
    /// Hits by this thread.
    pub count: u64,
}

/// Bits of the sched_switch `prev_state` field, as the tracepoint's
/// `print fmt` defines them.
pub mod task_state {
    /// `S`: interruptible sleep.
    pub const INTERRUPTIBLE: u64 = 0x1;
    /// `D`: uninterruptible sleep.
    pub const UNINTERRUPTIBLE: u64 = 0x2;
    /// `T`: stopped by a signal.
    pub const STOPPED: u64 = 0x4;
    /// `t`: stopped by a tracer.
    pub const TRACED: u64 = 0x8;
    /// `X`: dead.
    pub const DEAD: u64 = 0x10;
    /// `Z`: zombie.
    pub const ZOMBIE: u64 = 0x20;
    /// `P`: parked.
    pub const PARKED: u64 = 0x40;
    /// `I`: idle (an uninterruptible sleep that does not count as load).
    pub const IDLE: u64 = 0x80;
    /// `R+`: preempted while runnable.
    pub const PREEMPTED: u64 = 0x100;
}

/// Names of the maps and programs in the object, shared so the loader never
/// spells them differently from the programs.
pub mod names {
    /// The sched_switch tracepoint program.
    pub const SCHED_SWITCH: &str = "sched_switch";
    /// The same as a BTF-typed tracepoint (`tp_btf`), which reads the
    /// tasks by plain loads: tried first, [`SCHED_SWITCH`] or
    /// [`SCHED_SWITCH_KSTACK`] where the kernel refuses it.
    pub const SCHED_SWITCH_BTF: &str = "switch_btf";
    /// The same, for kernels without `bpf_task_pt_regs` and
    /// `bpf_get_current_task_btf` (before 5.15): user registers are read
    /// from the top of the kernel stack.
    pub const SCHED_SWITCH_KSTACK: &str = "switch_kstack";
    /// The uprobe program ("last function entered").
    pub const FN_ENTRY: &str = "fn_entry";
    /// The task iterator program.
    pub const TASK_ITER: &str = "task_iter";
    /// The same, for kernels without `bpf_task_pt_regs` (before 5.15).
    pub const TASK_ITER_KSTACK: &str = "iter_kstack";
    /// The lean task iterator (one [`super::TaskWait`] per thread).
    pub const TASK_WAITS: &str = "task_waits";
    /// The same, for kernels without `bpf_task_pt_regs` (before 5.15).
    pub const TASK_WAITS_KSTACK: &str = "waits_kstack";
    /// Per-thread kernel state, `HashMap<u32, ThreadRecord>` (the raw
    /// tracepoint programs).
    pub const THREADS: &str = "THREADS";
    /// Per-thread kernel state, `Array<ThreadSlot>` (the BTF-typed
    /// program).
    pub const SLOTS: &str = "SLOTS";
    /// `PerCpuArray<SlotStats>` of one entry.
    pub const SLOT_STATS: &str = "SLOT_STATS";
    /// Kernel stacks, `StackTraceMap`.
    pub const STACKS: &str = "STACKS";
    /// Switch events, `RingBuf` of [`super::SwitchEvent`].
    pub const EVENTS: &str = "EVENTS";
    /// Switch events `EVENTS` had no room for, `PerCpuArray<u64>` of one
    /// entry.
    pub const EVENTS_LOST: &str = "EVENTS_LOST";
    /// Last function entered per thread, `HashMap<u32, FnHit>`.
    pub const LAST_FN: &str = "LAST_FN";
    /// The configuration global.
    pub const CONFIG: &str = "CONFIG";
}

#[cfg(feature = "user")]
mod pod {
    // SAFETY: all of these are #[repr(C)] structs of integers with explicit
    // padding fields, so every bit pattern is a valid value.
    unsafe impl aya::Pod for super::Config {}
    // SAFETY: as above.
    unsafe impl aya::Pod for super::ThreadRecord {}
    // SAFETY: as above.
    unsafe impl aya::Pod for super::SwitchEvent {}
    // SAFETY: as above.
    unsafe impl aya::Pod for super::ThreadSlot {}
    // SAFETY: as above.
    unsafe impl aya::Pod for super::SlotStats {}
    // SAFETY: as above.
    unsafe impl aya::Pod for super::ClockSync {}
    // SAFETY: as above.
    unsafe impl aya::Pod for super::FnHit {}
    // SAFETY: as above.
    unsafe impl aya::Pod for super::TaskRecord {}
    // SAFETY: as above.
    unsafe impl aya::Pod for super::TaskWait {}
}
