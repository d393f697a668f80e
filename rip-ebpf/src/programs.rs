//! The programs: a sched_switch raw tracepoint that keeps, per thread of
//! the target process, when and how it left the CPU; and a uprobe that
//! keeps the last function each thread entered.
//!
//! Cost matters more than completeness here: sched_switch fires for every
//! context switch on the machine. A raw tracepoint runs on the
//! tracepoint's own arguments (the two tasks), where a classic one first
//! has the kernel build and copy a record of the switch; and switches of
//! other processes leave after one helper call and one read of the next
//! task's process id, without a map lookup. The program learns the
//! target's threads from the tasks themselves: no list is seeded.
//!
//! The programs that read saved user registers come in two builds of the
//! same code: one calls `bpf_task_pt_regs` (5.15 on), the other finds the
//! register frame at the top of the task's kernel stack (5.8 to 5.14). The
//! verifier refuses a program that names a helper the kernel lacks, even on
//! a path never taken, so the loader picks one build per kernel and loads
//! only that one.

use aya_ebpf::{
    EbpfContext, Global,
    bindings::{seq_file, task_struct},
    helpers::{
        bpf_get_current_pid_tgid, bpf_get_current_task_btf, bpf_ktime_get_ns,
        bpf_probe_read_kernel,
        generated::{bpf_get_current_task, bpf_get_task_stack, bpf_seq_write, bpf_task_pt_regs},
    },
    macros::{btf_tracepoint, map, raw_tracepoint, uprobe},
    maps::{Array, HashMap, PerCpuArray, RingBuf, StackTrace},
    programs::{BtfTracePointContext, ProbeContext, RawTracePointContext, tracing::StackIdContext},
};
use rip_ebpf::{
    CLOCK_READINGS, CLOCK_RESYNC_NS, ClockSync, Config, FnHit, KERNEL_STACK_SIZES, SLOT_PROBES,
    SWITCH_OFF, SWITCH_ON, SlotStats, SwitchEvent, TASK_STACK_DEPTH, TaskRecord, ThreadRecord,
    ThreadSlot, UserRegs, task_state,
};

/// Hash maps used from tracing programs are preallocated (flags 0): a
/// `BPF_F_NO_PREALLOC` map there makes kernels before 6.1 log a WARN and
/// PREEMPT_RT kernels before 6.1 refuse the program. The loader sizes them
/// to the target (`EbpfLoader::set_max_entries`) so preallocation stays
/// small; the sizes here are the upper bound.
const PREALLOC: u32 = 0;

/// Set by the loader (`EbpfLoader::override_global`).
#[unsafe(no_mangle)]
pub(crate) static CONFIG: Global<Config> = Global::new(Config {
    target_tgid: 0,
    regs: rip_ebpf::PtRegsOffsets {
        orig_ax: 0,
        args: [0; 6],
        ip: 0,
        sp: 0,
        bp: 0,
        cs: 0,
        size: 0,
        valid: 0,
        _pad: 0,
    },
    task: rip_ebpf::TaskOffsets {
        pid: 0,
        tgid: 0,
        state: 0,
        on_cpu: 0,
        on_rq: 0,
        comm: 0,
        exec_start: 0,
        sum_exec_runtime: 0,
        stack: 0,
        thread_pid: 0,
        group_leader: 0,
        pid_level: 0,
        pid_numbers: 0,
        upid_size: 0,
        upid_nr: 0,
        upid_ns: 0,
        se_cfs_rq: 0,
        cfs_rq_rq: 0,
        rq_clock_task: 0,
        rq_clock: 0,
        start_time: 0,
        valid: 0,
    },
    emit_events: 0,
    pid_ns: 0,
    switch_state_arg: 0,
    slot_mask: 0,
    switch_clock: 0,
});

/// One member of [`CONFIG`], read where it lives rather than from a copy
/// of the whole: `.rodata` is frozen before the programs load, so the
/// verifier knows the value read. An offset read so is a constant the
/// verifier accepts for a direct load through a BTF-typed pointer, and a
/// branch on a flag read so is never explored when not taken.
macro_rules! config {
    ($($field:tt)+) => {
        $crate::programs::volatile(&$crate::programs::config_ref().$($field)+)
    };
}
pub(crate) use config;

/// [`CONFIG`]'s value in place (see [`config!`]).
#[inline(always)]
pub(crate) fn config_ref() -> &'static Config {
    // SAFETY: `Global` is a transparent wrapper of an initialised value,
    // which nothing in the program writes.
    unsafe { &*(&raw const CONFIG).cast::<Config>() }
}

/// A volatile read of `value`: the compiler may not assume what the
/// loader wrote (see `aya_ebpf::Global`).
#[inline(always)]
pub(crate) fn volatile<T: Copy>(value: &T) -> T {
    // SAFETY: a reference is valid for reads.
    unsafe { core::ptr::read_volatile(value) }
}

/// Per-thread state: a thread of the target enters at its first switch
/// seen (off or onto a CPU).
#[map]
static THREADS: HashMap<u32, ThreadRecord> = HashMap::with_max_entries(1 << 17, PREALLOC);

/// Per-thread state for the BTF-typed program: a slot per thread (see
/// `rip_ebpf::ThreadSlot`), sized by the loader to a power of two.
#[map]
static SLOTS: Array<ThreadSlot> = Array::with_max_entries(1, 0);

/// Switch events `EVENTS` had no room for (both kinds: a lost switch onto
/// a CPU leaves no trace elsewhere), counted where they are dropped.
#[map]
static EVENTS_LOST: PerCpuArray<u64> = PerCpuArray::with_max_entries(1, 0);

/// Each CPU's offset between its scheduler clock and CLOCK_MONOTONIC (see
/// [`switch_clock`]).
#[map]
static CLOCK_SYNC: PerCpuArray<ClockSync> = PerCpuArray::with_max_entries(1, 0);

/// How `SLOTS` fared.
#[map]
static SLOT_STATS: PerCpuArray<SlotStats> = PerCpuArray::with_max_entries(1, 0);

/// Kernel stacks of threads at their last switch off the CPU.
#[map]
static STACKS: StackTrace = StackTrace::with_max_entries(1 << 14, 0);

/// Switch events for observers. Dropped (not blocked on) when full.
#[map]
static EVENTS: RingBuf = RingBuf::with_byte_size(1 << 20, 0);

/// Last function entered, per thread (uprobe mode).
#[map]
static LAST_FN: HashMap<u32, FnHit> = HashMap::with_max_entries(1 << 17, PREALLOC);

/// sched_switch, as a raw tracepoint: `TP_PROTO(bool preempt, struct
/// task_struct *prev, struct task_struct *next, ...)` (a fourth argument,
/// `prev_state`, exists from 5.18 only: before, the state is read from
/// `prev`, as the classic tracepoint did then).
#[raw_tracepoint(tracepoint = "sched_switch")]
pub fn sched_switch(ctx: RawTracePointContext) -> i32 {
    on_switch::<true>(ctx)
}

/// sched_switch for kernels without `bpf_task_pt_regs` (see the
/// module's documentation).
#[raw_tracepoint(tracepoint = "sched_switch")]
pub fn switch_kstack(ctx: RawTracePointContext) -> i32 {
    on_switch::<false>(ctx)
}

/// sched_switch as a BTF-typed tracepoint (`tp_btf`): the same work as
/// [`sched_switch`] for less. The tasks are BTF-typed pointers, so their
/// ids and state are plain loads at offsets the verifier knows (see
/// [`config!`]) rather than helper calls, and `prev`'s ids come from
/// `prev` rather than from a helper. The loader tries it first and falls
/// back to the raw tracepoint where the kernel refuses it.
#[btf_tracepoint(function = "sched_switch")]
pub fn switch_btf(ctx: BtfTracePointContext) -> i32 {
    btf_switch(
        &ctx,
        |tid, state, now| switch_off::<true, true>(&ctx, tid, state, now),
        switch_on::<true>,
    );
    0
}

/// The work of a BTF-typed sched_switch program: `off(tid, state, now)`
/// when `prev` is a thread of the target, then `on(tid, now)` when `next`
/// is, both read by plain loads.
#[inline(always)]
pub(crate) fn btf_switch(
    ctx: &BtfTracePointContext,
    off: impl FnOnce(u32, u64, u64),
    on: impl FnOnce(u32, u64),
) {
    let prev: *const u8 = ctx.arg(1);
    let next: *const u8 = ctx.arg(2);
    let target = config!(target_tgid);
    // Other processes' switches leave after two loads: the clock, the
    // dearest part of the program, is read only for the target's.
    // SAFETY: `prev` and `next` are the tracepoint's task pointers, typed
    // by BTF; the offsets come from the same BTF (see `task_id`).
    let prev_is_target = unsafe { task_id(prev, config!(task.tgid)) } == target;
    // SAFETY: as above.
    let next_is_target = unsafe { task_id(next, config!(task.tgid)) } == target;
    if !prev_is_target && !next_is_target {
        return;
    }
    // SAFETY: as above.
    let now = unsafe { switch_clock(prev) };
    if prev_is_target {
        // SAFETY: as above.
        let tid = unsafe { task_id(prev, config!(task.pid)) };
        off(tid, btf_switch_state(ctx, prev), now);
    }
    if next_is_target {
        // SAFETY: as above.
        on(unsafe { task_id(next, config!(task.pid)) }, now);
    }
}

/// The time of this switch on CLOCK_MONOTONIC.
///
/// `bpf_ktime_get_ns` costs more than the rest of `--pid`'s program
/// together (measured in docs/BENCHMARKS.md: about 60 ns a call here,
/// against about 10 for a switch's stores). With [`Config::switch_clock`]
/// the switch is stamped with the scheduler's own clock of this CPU
/// instead (`rq->clock`, which `__schedule` updated before the tracepoint:
/// three loads from `prev`, whose run queue is this CPU's), placed on
/// CLOCK_MONOTONIC by this CPU's offset between the two clocks (see
/// [`ClockSync`]), read again once [`CLOCK_RESYNC_NS`] have passed (or the
/// scheduler clock went back). The stamp is never earlier than the moment
/// the thread entered `__schedule` (the clock was updated after it); it is
/// later by the least time `__schedule` took from its clock update to the
/// tracepoint among the offset's readings, where `bpf_ktime_get_ns`'s stamp
/// is later by this switch's own: both are a microsecond or so. The two
/// clocks count the same counter, so their drift in between is parts per
/// million of a few milliseconds.
///
/// # Safety
/// `prev` is the tracepoint's BTF-typed `prev` task.
#[inline(always)]
unsafe fn switch_clock(prev: *const u8) -> u64 {
    if config!(switch_clock) == 0 {
        // SAFETY: no preconditions.
        return unsafe { bpf_ktime_get_ns() };
    }
    // SAFETY: BTF-typed pointer walks at offsets from the same BTF: the
    // verifier types each load, and a fault reads 0.
    let clock = unsafe {
        let cfs_rq: *const u8 =
            core::ptr::read_volatile(prev.add(config!(task.se_cfs_rq) as usize).cast());
        let rq: *const u8 =
            core::ptr::read_volatile(cfs_rq.add(config!(task.cfs_rq_rq) as usize).cast());
        core::ptr::read_volatile(rq.add(config!(task.rq_clock) as usize).cast::<u64>())
    };
    let sync = CLOCK_SYNC.get_ptr_mut(0);
    let (Some(sync), true) = (sync, clock != 0) else {
        // SAFETY: no preconditions.
        return unsafe { bpf_ktime_get_ns() };
    };
    // SAFETY: this CPU's value, valid for the program's run (the program
    // does not migrate).
    unsafe {
        let s = &mut *sync;
        if s.rq_ns == 0 || clock.wrapping_sub(s.rq_ns) > CLOCK_RESYNC_NS {
            let now = bpf_ktime_get_ns();
            let reading = now.wrapping_sub(clock);
            if s.rq_ns == 0 {
                // The first reading on this CPU is used until the first
                // smallest of several replaces it.
                s.offset = reading;
                s.least = reading;
                s.readings = 0;
            }
            s.rq_ns = clock;
            // Readings compared as signed differences: offsets wrap.
            if (reading.wrapping_sub(s.least) as i64) < 0 {
                s.least = reading;
            }
            s.readings += 1;
            if s.readings >= CLOCK_READINGS {
                s.offset = s.least;
                s.least = reading;
                s.readings = 0;
            }
            return now;
        }
        clock.wrapping_add(s.offset)
    }
}

/// A 32-bit member of a task (`pid`, `tgid`, the low half of `state`) by
/// a direct load.
///
/// # Safety
/// `task` is a BTF-typed `task_struct` pointer of a `tp_btf` program and
/// `offset` a value read with [`config!`]: the verifier then checks the
/// load against the kernel's BTF (and guards it against faults).
#[inline(always)]
pub(crate) unsafe fn task_id(task: *const u8, offset: u32) -> u32 {
    // SAFETY: the caller's contract.
    unsafe { core::ptr::read_volatile(task.add(offset as usize).cast::<u32>()) }
}

/// `prev`'s state as it leaves the CPU, in a `tp_btf` program: as
/// [`switch_state`], by plain loads. The tracepoint's fourth argument is
/// only read where the kernel has it: the verifier, which knows the flag,
/// never looks at the other branch (a `tp_btf` program may not name an
/// argument its tracepoint lacks).
#[inline(always)]
pub(crate) fn btf_switch_state(ctx: &BtfTracePointContext, prev: *const u8) -> u64 {
    let preempt: u64 = ctx.arg(0);
    let raw = if config!(switch_state_arg) != 0 {
        ctx.arg::<u64>(3) as u32
    } else {
        // SAFETY: as in `switch_btf` (`state` was a long before 5.14: its
        // value is in its low half on this little-endian target).
        unsafe { task_id(prev, config!(task.state)) }
    };
    reported_state(raw, preempt != 0)
}

/// Both builds of sched_switch. `HELPER`: read user registers with
/// `bpf_task_pt_regs` rather than from the top of the kernel stack.
#[inline(always)]
fn on_switch<const HELPER: bool>(ctx: RawTracePointContext) -> i32 {
    let cfg = CONFIG.load();
    // `prev` is the current task while the tracepoint runs.
    let id = bpf_get_current_pid_tgid();
    let prev_is_target = (id >> 32) as u32 == cfg.target_tgid;
    let next = target_thread(&cfg, ctx.arg(2));
    // Other processes' switches leave without reading the clock.
    if !prev_is_target && next.is_none() {
        return 0;
    }
    // SAFETY: no preconditions.
    let now = unsafe { bpf_ktime_get_ns() };
    if prev_is_target {
        let state = switch_state(&cfg, &ctx);
        switch_off::<HELPER, false>(&ctx, id as u32, state, now);
    }
    if let Some(tid) = next {
        switch_on::<false>(tid, now);
    }
    0
}

/// The thread id of `task` when it is a thread of the target: one read of
/// its process id decides, so other processes' switches cost no lookup.
#[inline(always)]
pub(crate) fn target_thread(cfg: &Config, task: *const u8) -> Option<u32> {
    // SAFETY: probe reads tolerate any address; offsets come from BTF.
    let tgid = unsafe { bpf_probe_read_kernel(task.add(cfg.task.tgid as usize) as *const u32) };
    if tgid != Ok(cfg.target_tgid) {
        return None;
    }
    // SAFETY: as above.
    unsafe { bpf_probe_read_kernel(task.add(cfg.task.pid as usize) as *const u32) }.ok()
}

/// `prev`'s state as it leaves the CPU, as the classic tracepoint's
/// `prev_state` reports it (see [`reported_state`]).
///
/// From 5.18 the tracepoint is given the state `__schedule` read before
/// it dequeued `prev`: `prev->__state` itself may by then be a waker's
/// `TASK_WAKING` (a thread that blocked would look runnable). Before, it
/// has only `prev`'s, which the classic tracepoint read too.
#[inline(always)]
pub(crate) fn switch_state(cfg: &Config, ctx: &RawTracePointContext) -> u64 {
    let preempt: u64 = ctx.arg(0);
    let raw = if cfg.switch_state_arg != 0 {
        // Read through a probe, never a context access: a raw
        // tracepoint's program may not reach past the arguments of the
        // oldest kernel it loads on (the attach checks the furthest one
        // the verifier saw, dead branch or not).
        let args = ctx.as_ptr() as *const u64;
        // SAFETY: probe reads tolerate any address; this kernel's
        // tracepoint has a fourth argument (BTF says so).
        unsafe { bpf_probe_read_kernel(args.wrapping_add(3)) }.unwrap_or(0) as u32
    } else {
        let prev: *const u8 = ctx.arg(1);
        // SAFETY: probe reads tolerate any address; the offset comes from
        // BTF (`state` was a long before 5.14: its value is in its low
        // half on this little-endian target).
        unsafe { bpf_probe_read_kernel(prev.add(cfg.task.state as usize) as *const u32) }
            .unwrap_or(0)
    };
    reported_state(raw, preempt != 0)
}

/// The bits of a task's state that the sched_switch tracepoint reports
/// (`TASK_REPORT`), and the flag a dying task has set (`TASK_DEAD`).
const TASK_REPORT: u32 = 0x7f;
const TASK_DEAD: u32 = 0x80;
/// `TASK_IDLE` (`TASK_UNINTERRUPTIBLE | TASK_NOLOAD`).
const TASK_IDLE: u32 = 0x402;

/// A task's state as the classic tracepoint's `prev_state` reports it (see
/// [`task_state`]): the highest reported bit of its state, `I` for an idle
/// wait, `X` for a dying task, `R+` when preempted.
#[inline(always)]
fn reported_state(raw: u32, preempt: bool) -> u64 {
    if preempt {
        return task_state::PREEMPTED;
    }
    if raw == TASK_IDLE {
        return task_state::IDLE;
    }
    if raw & TASK_DEAD != 0 {
        return task_state::DEAD;
    }
    let bits = raw & TASK_REPORT;
    // Written out: a loop could reach the verifier unrolled or not.
    let top = if bits & 0x40 != 0 {
        0x40
    } else if bits & 0x20 != 0 {
        0x20
    } else if bits & 0x10 != 0 {
        0x10
    } else if bits & 0x8 != 0 {
        0x8
    } else if bits & 0x4 != 0 {
        0x4
    } else if bits & 0x2 != 0 {
        0x2
    } else {
        bits & 0x1
    };
    u64::from(top)
}

/// A switch off of thread `tid`. `SLOTTED`: its record is in `SLOTS`
/// (the BTF-typed program), else in `THREADS`.
#[inline(always)]
fn switch_off<const HELPER: bool, const SLOTTED: bool>(
    ctx: &impl StackIdContext,
    tid: u32,
    state: u64,
    now: u64,
) {
    let events = config!(emit_events) != 0;
    // This runs at every switch of a traced thread. A kernel stack walk
    // costs microseconds; reports take stacks from the task iterator
    // instead, so only observers of events pay for them.
    let kstack_id = if events {
        ctx.get_stackid(&STACKS, 0).unwrap_or(-1)
    } else {
        -1
    };
    // Likewise the saved user registers (ten reads): the iterator reads
    // them for reports.
    let regs = if events {
        // SAFETY: the current task is valid for the duration of the program.
        unsafe { user_regs::<HELPER>(current_task::<HELPER>(), &CONFIG.load()) }
    } else {
        UserRegs {
            syscall_nr: -1,
            ..UserRegs::default()
        }
    };

    let Some(rec) = record::<SLOTTED>(tid) else {
        return;
    };
    // SAFETY: a map value pointer stays valid for the program's run.
    unsafe {
        (*rec).off_cpu_ns = now;
        (*rec).state = state;
        (*rec).switches += 1;
        // Without events a slot keeps the "none" its claim wrote
        // (`UNSEEN`): eleven stores fewer at every switch.
        if events || !SLOTTED {
            (*rec).kstack_id = kstack_id;
            (*rec).regs = regs;
        }
        (*rec).on_cpu = 0;
    }
    emit(SwitchEvent {
        ts_ns: now,
        tid,
        kind: SWITCH_OFF,
        state,
        kstack_id,
        regs,
    });
}

/// Thread `tid`'s record, created at its first switch (none when the
/// table is full): in `SLOTS` when `SLOTTED`, else in `THREADS`.
#[inline(always)]
fn record<const SLOTTED: bool>(tid: u32) -> Option<*mut ThreadRecord> {
    if SLOTTED {
        // SAFETY: a map value pointer stays valid for the program's run.
        return slot(tid).map(|s| unsafe { &raw mut (*s).rec });
    }
    if let Some(rec) = THREADS.get_ptr_mut(tid) {
        return Some(rec);
    }
    let _ = THREADS.insert(tid, ThreadRecord::default(), 0);
    THREADS.get_ptr_mut(tid)
}

/// A claimed slot's record before its thread's first switch: no kernel
/// stack, no registers (what the record says of them when events are off).
const UNSEEN: ThreadRecord = ThreadRecord {
    off_cpu_ns: 0,
    on_cpu_ns: 0,
    state: 0,
    switches: 0,
    kstack_id: -1,
    regs: UserRegs {
        syscall_nr: -1,
        args: [0; 6],
        ip: 0,
        sp: 0,
        bp: 0,
    },
    on_cpu: 0,
    _pad: 0,
};

/// `SLOTS`' entry `i` modulo its size.
#[inline(always)]
fn slot_at(tid: u32, i: u32) -> Option<*mut ThreadSlot> {
    SLOTS.get_ptr_mut(tid.wrapping_add(i) & config!(slot_mask))
}

/// Thread `tid`'s slot, if it holds one (see `rip_ebpf::ThreadSlot`).
#[inline(always)]
pub(crate) fn find_slot(tid: u32) -> Option<*mut ThreadSlot> {
    // Written out rather than looped: each probe is an array access the
    // verifier inlines, and the first one nearly always answers.
    let hit = |s: Option<*mut ThreadSlot>| {
        // SAFETY: a map value pointer stays valid for the program's run.
        s.filter(|&s| unsafe { slot_tid(s) } == u64::from(tid))
    };
    hit(slot_at(tid, 0))
        .or_else(|| hit(slot_at(tid, 1)))
        .or_else(|| hit(slot_at(tid, 2)))
        .or_else(|| hit(slot_at(tid, 3)))
}

const _: () = assert!(SLOT_PROBES == 4, "find_slot and slot probe four slots");

/// A slot's `tid`, read once (a claim may change it meanwhile: see
/// [`claim`]).
///
/// # Safety
/// `s` points to a live map value.
#[inline(always)]
unsafe fn slot_tid(s: *mut ThreadSlot) -> u64 {
    // SAFETY: the caller's contract; `tid` is an aligned u64 written only
    // by whole-word compare-and-swaps.
    unsafe { core::ptr::read_volatile(&raw const (*s).tid) }
}

/// Gives slot `s` to `tid` if it is still held by `held`: one atomic
/// compare-and-swap (`BPF_CMPXCHG`, Linux 5.12; a kernel without it
/// refuses the program, which is how the loader learns to fall back).
#[inline(always)]
fn claim(s: *mut ThreadSlot, held: u64, tid: u32) -> bool {
    use core::intrinsics::{AtomicOrdering, atomic_cxchg};
    // SAFETY: `s` is a live map value; `tid` is an aligned u64 that every
    // writer changes atomically.
    let (_, ok) = unsafe {
        atomic_cxchg::<u64, { AtomicOrdering::AcqRel }, { AtomicOrdering::Acquire }>(
            &raw mut (*s).tid,
            held,
            u64::from(tid),
        )
    };
    ok
}

/// Thread `tid`'s slot, claimed at its first switch: a free one, else one
/// of an exited thread; none when neither is left (counted either way,
/// see `rip_ebpf::SlotStats`).
#[inline(always)]
fn slot(tid: u32) -> Option<*mut ThreadSlot> {
    if let Some(s) = find_slot(tid) {
        return Some(s);
    }
    let stats = SLOT_STATS.get_ptr_mut(0);
    let count = |f: fn(*mut SlotStats)| {
        if let Some(st) = stats {
            f(st);
        }
    };
    // A free slot. Two threads may race for it from two CPUs: the
    // compare-and-swap gives it to one.
    for i in 0..SLOT_PROBES {
        let Some(s) = slot_at(tid, i) else { continue };
        // SAFETY: a map value pointer stays valid for the program's run.
        if unsafe { slot_tid(s) } == 0 && claim(s, 0, tid) {
            // SAFETY: as above; the slot is this thread's now.
            unsafe { (*s).rec = UNSEEN };
            // SAFETY: this CPU's value.
            count(|st| unsafe { (*st).claimed += 1 });
            return Some(s);
        }
    }
    // The slot of a thread that has exited: its last switch said so, and
    // it will switch no more.
    for i in 0..SLOT_PROBES {
        let Some(s) = slot_at(tid, i) else { continue };
        // SAFETY: as above.
        let (held, state) = unsafe { (slot_tid(s), (*s).rec.state) };
        if held != 0 && state & (task_state::DEAD | task_state::ZOMBIE) != 0 && claim(s, held, tid)
        {
            // SAFETY: as above.
            unsafe { (*s).rec = UNSEEN };
            // SAFETY: this CPU's value.
            count(|st| unsafe { (*st).reused += 1 });
            return Some(s);
        }
    }
    // SAFETY: this CPU's value.
    count(|st| unsafe { (*st).full += 1 });
    None
}

fn switch_on<const SLOTTED: bool>(tid: u32, now: u64) {
    let Some(rec) = record::<SLOTTED>(tid) else {
        return;
    };
    // SAFETY: a map value pointer stays valid for the program's run.
    unsafe {
        (*rec).on_cpu_ns = now;
        (*rec).on_cpu = 1;
    }
    emit(SwitchEvent {
        ts_ns: now,
        tid,
        kind: SWITCH_ON,
        ..SwitchEvent::default()
    });
}

/// `BPF_RB_NO_WAKEUP`: the reader polls on a timer instead of being woken
/// per event, which would cost the traced threads a wakeup per switch.
const BPF_RB_NO_WAKEUP: u64 = 1;

fn emit(ev: SwitchEvent) {
    if config!(emit_events) == 0 {
        return;
    }
    if let Some(mut slot) = EVENTS.reserve::<SwitchEvent>(0) {
        slot.write(ev);
        slot.submit(BPF_RB_NO_WAKEUP);
    } else if let Some(lost) = EVENTS_LOST.get_ptr_mut(0) {
        // SAFETY: this CPU's value, valid for the program's run.
        unsafe { *lost += 1 };
    }
}

/// The current task: as a BTF pointer where `bpf_task_pt_regs` needs one
/// (`bpf_get_current_task_btf`, 5.11), else as a plain address, which is all
/// probe reads need.
#[inline(always)]
pub(crate) fn current_task<const HELPER: bool>() -> *mut task_struct {
    if HELPER {
        // SAFETY: no preconditions.
        unsafe { bpf_get_current_task_btf() }
    } else {
        // SAFETY: no preconditions.
        unsafe { bpf_get_current_task() as *mut task_struct }
    }
}

/// Where a task's saved user registers are: from `bpf_task_pt_regs`, or at
/// the top of its kernel stack, `stack + THREAD_SIZE - sizeof(pt_regs)`
/// (x86-64 has no padding above them before FRED). The stack's size is not
/// in BTF, so each candidate is tried and the frame whose `cs` says "user
/// mode" is kept. Null when there is none (a kernel thread).
///
/// # Safety
/// As [`user_regs`].
#[inline(always)]
pub(crate) unsafe fn pt_regs_of<const HELPER: bool>(
    task: *mut task_struct,
    cfg: &Config,
) -> *const u8 {
    if HELPER {
        // SAFETY: `task` is a trusted BTF pointer (caller's contract).
        return unsafe { bpf_task_pt_regs(task) as *const u8 };
    }
    let base = task as *const u8;
    // SAFETY: probe reads tolerate any address.
    let Ok(stack) =
        (unsafe { bpf_probe_read_kernel(base.add(cfg.task.stack as usize) as *const u64) })
    else {
        return core::ptr::null();
    };
    if stack == 0 {
        return core::ptr::null();
    }
    for size in KERNEL_STACK_SIZES {
        let regs = (stack + size as u64 - cfg.regs.size as u64) as *const u8;
        // SAFETY: as above; a wrong guess reads a guard page or another
        // frame, which the `cs` check rejects.
        let cs = unsafe { bpf_probe_read_kernel(regs.add(cfg.regs.cs as usize) as *const u64) };
        if let Ok(cs) = cs
            && cs & 3 == 3
        {
            return regs;
        }
    }
    core::ptr::null()
}

/// A task's saved user registers: which syscall it is in and with which
/// arguments. Offsets into `struct pt_regs` come from the kernel's BTF.
///
/// # Safety
/// `task` must be a valid `task_struct` pointer (the current task, or the
/// task an iterator hands us after a null check); trusted (BTF) when
/// `HELPER`.
#[inline(always)]
pub(crate) unsafe fn user_regs<const HELPER: bool>(
    task: *mut task_struct,
    cfg: &Config,
) -> UserRegs {
    let off = &cfg.regs;
    let mut out = UserRegs {
        syscall_nr: -1,
        ..UserRegs::default()
    };
    if off.valid == 0 {
        return out;
    }
    // SAFETY: the frame pointer comes from the helper or a checked guess
    // (or is null); every read goes through bpf_probe_read_kernel.
    unsafe {
        let regs = pt_regs_of::<HELPER>(task, cfg);
        if regs.is_null() {
            return out;
        }
        let rd = |o: u32| bpf_probe_read_kernel(regs.add(o as usize) as *const u64).unwrap_or(0);
        out.syscall_nr = rd(off.orig_ax) as i64;
        out.args = [
            rd(off.args[0]),
            rd(off.args[1]),
            rd(off.args[2]),
            rd(off.args[3]),
            rd(off.args[4]),
            rd(off.args[5]),
        ];
        out.ip = rd(off.ip);
        out.sp = rd(off.sp);
        out.bp = rd(off.bp);
    }
    out
}

/// Scratch space for one [`TaskRecord`]: too big for the 512-byte BPF stack.
#[map]
static TASK_SCRATCH: PerCpuArray<TaskRecord> = PerCpuArray::with_max_entries(1, 0);

/// `struct bpf_iter__task`: the context of a task iterator.
#[repr(C)]
pub(crate) struct IterTaskCtx {
    pub(crate) meta: *mut bpf_iter_meta,
    pub(crate) task: *mut task_struct,
}

/// `struct bpf_iter_meta`; only `seq` is read.
#[repr(C)]
pub(crate) struct bpf_iter_meta {
    pub(crate) seq: *mut seq_file,
}

/// Task iterator: writes one [`TaskRecord`] per thread of the target, with
/// its state, saved user registers and kernel stack, to the iterator's
/// output. This is how threads that blocked before rip-probe attached are
/// seen: in one pass, instead of five /proc files per thread.
#[unsafe(no_mangle)]
#[unsafe(link_section = "iter/task")]
pub fn task_iter(ctx: *mut core::ffi::c_void) -> i32 {
    each_task::<true>(ctx)
}

/// The task iterator for kernels without `bpf_task_pt_regs` (see the
/// module's documentation).
#[unsafe(no_mangle)]
#[unsafe(link_section = "iter/task")]
pub fn iter_kstack(ctx: *mut core::ffi::c_void) -> i32 {
    each_task::<false>(ctx)
}

/// Both builds of the task iterator (`HELPER` as in [`on_switch`]).
#[inline(always)]
fn each_task<const HELPER: bool>(ctx: *mut core::ffi::c_void) -> i32 {
    let cfg = CONFIG.load();
    let Some(crate::iter_programs::Visit {
        meta,
        task,
        tid,
        tgid,
        ns_tid,
        ns_tgid,
    }) = crate::iter_programs::visit(ctx, &cfg)
    else {
        return 0;
    };
    let t = &cfg.task;
    let base = task as *const u8;
    // SAFETY: all reads go through bpf_probe_read_kernel at BTF offsets.
    let rd32 =
        |o: u32| unsafe { bpf_probe_read_kernel(base.add(o as usize) as *const u32) }.unwrap_or(0);
    // SAFETY: as above.
    let rd64 =
        |o: u32| unsafe { bpf_probe_read_kernel(base.add(o as usize) as *const u64) }.unwrap_or(0);
    // SAFETY: as above.
    let rd8 = |o: u32| unsafe { bpf_probe_read_kernel(base.add(o as usize)) }.unwrap_or(0);
    let Some(rec) = TASK_SCRATCH.get_ptr_mut(0) else {
        return 0;
    };
    // SAFETY: `rec` points to this CPU's scratch value; `task` is non-null
    // and trusted (iterator context); `meta` is the iterator's metadata.
    unsafe {
        (*rec).tid = tid;
        (*rec).tgid = tgid;
        (*rec).ns_tid = ns_tid;
        (*rec).ns_tgid = ns_tgid;
        (*rec).state = rd32(t.state);
        // `on_cpu` and `on_rq` were ints and are u8 from 7.x on, beside
        // other flags (`is_blocked`): their values (0 to 2) are in their
        // first byte either way on this little-endian target.
        (*rec).on_cpu = u32::from(rd8(t.on_cpu));
        (*rec).on_rq = u32::from(rd8(t.on_rq));
        // What sched_switch last saw of it, read right after its state:
        // a report's blocked time needs both to describe one moment (a
        // table read before the pass could predate a wakeup and a new
        // sleep).
        let found = if config!(slot_mask) != 0 {
            find_slot(tid).map(|s| &(*s).rec)
        } else {
            THREADS.get(tid)
        };
        match found {
            Some(sw) => {
                (*rec).sw_off_ns = sw.off_cpu_ns;
                (*rec).sw_on_ns = sw.on_cpu_ns;
                (*rec).sw_on_cpu = sw.on_cpu;
            }
            None => {
                (*rec).sw_off_ns = 0;
                (*rec).sw_on_ns = 0;
                (*rec).sw_on_cpu = 0;
            }
        }
        (*rec)._pad = 0;
        (*rec).start_ns = if t.start_time != 0 {
            rd64(t.start_time)
        } else {
            0
        };
        (*rec).exec_start = rd64(t.exec_start);
        (*rec).sum_exec_runtime = rd64(t.sum_exec_runtime);
        (*rec).now_ns = bpf_ktime_get_ns();
        // A plain address is enough for a probe read, and works before 5.11.
        let cur = bpf_get_current_task() as *const u8;
        (*rec).cur_exec_start =
            bpf_probe_read_kernel(cur.add(t.exec_start as usize) as *const u64).unwrap_or(0);
        // The clock of the task's own CPU, where its exec_start was
        // stamped: se.cfs_rq->rq->clock_task.
        (*rec).rq_clock_task = 0;
        if t.se_cfs_rq != 0 {
            let cfs_rq = rd64(t.se_cfs_rq) as *const u8;
            if let Ok(rq) = bpf_probe_read_kernel(cfs_rq.add(t.cfs_rq_rq as usize) as *const u64) {
                let rq = rq as *const u8;
                (*rec).rq_clock_task =
                    bpf_probe_read_kernel(rq.add(t.rq_clock_task as usize) as *const u64)
                        .unwrap_or(0);
            }
        }
        crate::iter_programs::user_regs_at_once::<HELPER>(
            task,
            &cfg,
            &raw mut (*rec).kstack,
            &raw mut (*rec).regs,
        );
        (*rec).comm =
            bpf_probe_read_kernel(base.add(t.comm as usize) as *const [u8; 16]).unwrap_or([0; 16]);
        let bytes = bpf_get_task_stack(
            task,
            (&raw mut (*rec).kstack).cast(),
            (TASK_STACK_DEPTH * 8) as u32,
            0,
        );
        (*rec).kstack_len = if bytes > 0 { (bytes / 8) as u32 } else { 0 };
        bpf_seq_write(
            (*meta).seq,
            rec as *const core::ffi::c_void,
            core::mem::size_of::<TaskRecord>() as u32,
        );
    }
    0
}

/// A task's thread and process ids in rip-probe's pid namespace ((0, 0)
/// for a process other than `want_tgid` when given; 0 where
/// it is not in it), as the kernel's `pid_nr_ns` finds them: the
/// namespace is the one of the task running the iterator (rip-probe,
/// reading it), at depth `level`; a task's `struct pid` holds its id at
/// each depth, valid for us when that depth's namespace is ours.
#[inline(always)]
pub(crate) fn ns_ids(task: *const u8, cfg: &Config, want_tgid: Option<u32>) -> (u32, u32) {
    let t = &cfg.task;
    // SAFETY: every read goes through bpf_probe_read_kernel, which
    // tolerates any address; offsets come from BTF.
    let rd = |p: *const u8, o: u32| unsafe {
        bpf_probe_read_kernel(p.add(o as usize) as *const u64).unwrap_or(0) as *const u8
    };
    // SAFETY: as above.
    let rd32 = |p: *const u8, o: u32| unsafe {
        bpf_probe_read_kernel(p.add(o as usize) as *const u32).unwrap_or(0)
    };
    // SAFETY: no preconditions; a plain address is enough for probe reads.
    let me = unsafe { bpf_get_current_task() } as *const u8;
    let my_pid = rd(me, t.thread_pid);
    if my_pid.is_null() {
        return (0, 0);
    }
    let level = rd32(my_pid, t.pid_level);
    let at = |pid: *const u8| -> *const u8 {
        // SAFETY: address arithmetic only; the result is only probe-read.
        unsafe { pid.add(t.pid_numbers.wrapping_add(level.wrapping_mul(t.upid_size)) as usize) }
    };
    let ours = rd(at(my_pid), t.upid_ns);
    let nr = |task: *const u8| -> u32 {
        let pid = rd(task, t.thread_pid);
        if pid.is_null() || rd32(pid, t.pid_level) < level || rd(at(pid), t.upid_ns) != ours {
            return 0;
        }
        rd32(at(pid), t.upid_nr)
    };
    let leader = rd(task, t.group_leader);
    let tgid = if leader.is_null() { 0 } else { nr(leader) };
    if want_tgid.is_some_and(|w| w != tgid) {
        // Not the process looked for: its thread's id is not needed.
        return (0, 0);
    }
    (nr(task), tgid)
}

/// Attached by the loader to each function the user asked for; records the
/// probed address as the thread's last function entered.
#[uprobe]
pub fn fn_entry(ctx: ProbeContext) -> u32 {
    let tid = bpf_get_current_pid_tgid() as u32;
    // SAFETY: for a uprobe the context is the user register frame.
    let addr = unsafe { (*ctx.regs).rip };
    // SAFETY: no preconditions.
    let now = unsafe { bpf_ktime_get_ns() };
    match LAST_FN.get_ptr_mut(tid) {
        // SAFETY: a map value pointer stays valid for the program's run.
        Some(hit) => unsafe {
            (*hit).addr = addr;
            (*hit).ts_ns = now;
            (*hit).count += 1;
        },
        None => {
            let _ = LAST_FN.insert(
                tid,
                FnHit {
                    addr,
                    ts_ns: now,
                    count: 1,
                },
                0,
            );
        }
    }
    0
}

#[cfg(not(test))]
#[panic_handler]
fn panic(_info: &core::panic::PanicInfo) -> ! {
    loop {}
}

#[unsafe(link_section = "license")]
#[unsafe(no_mangle)]
static LICENSE: [u8; 4] = *b"GPL\0";
