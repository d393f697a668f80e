//! `rip-probe leaks`: raw_syscalls' sys_enter and sys_exit filtered to the
//! target, sending each traced call that succeeded, with a copy of the
//! user stack for acquisitions (see `rip_ebpf::leaks`).
//!
//! Two builds of the exit program, as for the other register-reading
//! programs: one with `bpf_task_pt_regs` (5.15 on), one reading the
//! register frame at the top of the kernel stack.
//!
//! The heap: `heap_entry` (a uprobe on each function of the allocator's
//! malloc family) and `heap_return` (a uretprobe on those that allocate)
//! send the blocks allocated and freed through the same buffer, as
//! events past the syscalls (`rip_ebpf::leaks::heap`). Uprobes give the
//! user registers themselves: one build serves every kernel.

use aya_ebpf::{
    Global,
    helpers::{
        bpf_get_current_pid_tgid, bpf_ktime_get_ns, bpf_probe_read_user,
        generated::bpf_probe_read_user as probe_read_user_raw,
    },
    macros::{map, tracepoint, uprobe, uretprobe},
    maps::{Array, HashMap, PerCpuArray, RingBuf},
    programs::{ProbeContext, RetProbeContext, TracePointContext},
};
use rip_ebpf::leaks::{
    HeapCall, LEAK_STACK, LeakAcquire, LeakCall, LeakConfig, LeakEvent, LeakStats, call, heap,
};

use crate::{offcpu_programs::user_frame, programs::CONFIG};

/// Set by the loader (`EbpfLoader::override_global`).
#[unsafe(no_mangle)]
static LEAK_CONFIG: Global<LeakConfig> = Global::new(LeakConfig {
    enter_id_off: 0,
    enter_args_off: 0,
    exit_id_off: 0,
    exit_ret_off: 0,
});

/// What each syscall is to the leak tracer ([`call`]); written by user
/// space.
#[map]
static LEAK_CALLS: Array<u8> = Array::with_max_entries(rip_ebpf::leaks::MAX_SYSCALL, 0);

/// Traced calls in flight, by thread (preallocated: see
/// `programs::PREALLOC`; sized by the loader).
#[map]
static LEAK_IN_FLIGHT: HashMap<u32, LeakCall> = HashMap::with_max_entries(1, 0);

/// The events, to user space (sized by the loader).
#[map]
static LEAK_EVENTS: RingBuf = RingBuf::with_byte_size(4096, 0);

/// Counters.
#[map]
static LEAK_STATS: PerCpuArray<LeakStats> = PerCpuArray::with_max_entries(1, 0);

/// Probed allocator addresses (as the entry probe's `ip` sees them) to
/// their function ([`heap`]); written by user space.
#[map]
static HEAP_FNS: HashMap<u64, u32> = HashMap::with_max_entries(64, 0);

/// Allocator calls in flight, by thread (sized by the loader).
#[map]
static HEAP_IN_FLIGHT: HashMap<u32, HeapCall> = HashMap::with_max_entries(1, 0);

/// 1 once the window begins; before, the heap probes only count calls.
#[map]
static HEAP_ON: Array<u32> = Array::with_max_entries(1, 0);

/// `BPF_RB_NO_WAKEUP`: user space polls on a timer.
const BPF_RB_NO_WAKEUP: u64 = 1;

/// pipe, pipe2, socketpair: the syscalls that write two descriptors to
/// user memory (x86-64 numbers), and the argument that points at them.
const PIPE: u64 = 22;
const PIPE2: u64 = 293;
const SOCKETPAIR: u64 = 53;

#[inline(always)]
fn target_tid() -> Option<u32> {
    let id = bpf_get_current_pid_tgid();
    ((id >> 32) as u32 == CONFIG.load().target_tgid).then_some(id as u32)
}

#[inline(always)]
fn stats() -> Option<*mut LeakStats> {
    LEAK_STATS.get_ptr_mut(0)
}

/// raw_syscalls:sys_enter: remembers a traced call's arguments.
#[tracepoint(category = "raw_syscalls", name = "sys_enter")]
pub fn leaks_enter(ctx: TracePointContext) -> u32 {
    let Some(tid) = target_tid() else {
        return 0;
    };
    let cfg = LEAK_CONFIG.load();
    // SAFETY: offsets come from the tracepoint's format file.
    let Ok(nr) = (unsafe { ctx.read_at::<i64>(cfg.enter_id_off as usize) }) else {
        return 0;
    };
    if nr < 0 || nr as u32 >= rip_ebpf::leaks::MAX_SYSCALL {
        return 0;
    }
    match LEAK_CALLS.get(nr as u32) {
        Some(&c) if c != call::NONE => {}
        _ => return 0,
    }
    // SAFETY: as above.
    let args = unsafe { ctx.read_at::<[u64; 6]>(cfg.enter_args_off as usize) }.unwrap_or([0; 6]);
    let c = LeakCall {
        nr: nr as u64,
        args,
    };
    if LEAK_IN_FLIGHT.insert(tid, c, 0).is_err()
        && let Some(st) = stats()
    {
        // SAFETY: this CPU's value, valid for the program's run.
        unsafe { (*st).calls_full += 1 };
    }
    0
}

/// raw_syscalls:sys_exit, user registers from `bpf_task_pt_regs`.
#[tracepoint(category = "raw_syscalls", name = "sys_exit")]
pub fn leaks_exit(ctx: TracePointContext) -> u32 {
    on_exit::<true>(ctx)
}

/// raw_syscalls:sys_exit for kernels before 5.15.
#[tracepoint(category = "raw_syscalls", name = "sys_exit")]
pub fn leaks_exit_kstack(ctx: TracePointContext) -> u32 {
    on_exit::<false>(ctx)
}

#[inline(always)]
fn on_exit<const HELPER: bool>(ctx: TracePointContext) -> u32 {
    let Some(tid) = target_tid() else {
        return 0;
    };
    // SAFETY: a map value pointer stays valid for the program's run.
    let Some(c) = LEAK_IN_FLIGHT.get_ptr(tid).map(|p| unsafe { *p }) else {
        return 0;
    };
    let _ = LEAK_IN_FLIGHT.remove(tid);
    let cfg = LEAK_CONFIG.load();
    // SAFETY: the offset comes from the tracepoint's format file.
    let ret = unsafe { ctx.read_at::<i64>(cfg.exit_ret_off as usize) }.unwrap_or(-1);
    let st = stats();
    // Failed: nothing was acquired or released. (mmap's addresses are
    // below -4095 as signed numbers only in the kernel's half.)
    if (-4095..0).contains(&ret) {
        if let Some(st) = st {
            // SAFETY: this CPU's value.
            unsafe { (*st).failed += 1 };
        }
        return 0;
    }
    let kind = match LEAK_CALLS.get(c.nr as u32) {
        Some(&k) => k,
        None => return 0,
    };
    let fds = if c.nr == PIPE || c.nr == PIPE2 || c.nr == SOCKETPAIR {
        let at = if c.nr == SOCKETPAIR {
            c.args[3]
        } else {
            c.args[0]
        };
        // SAFETY: a fault-tolerant read of the target's memory.
        unsafe { bpf_probe_read_user(at as *const [i32; 2]) }.unwrap_or([-1, -1])
    } else {
        [-1, -1]
    };
    let head = LeakEvent {
        // SAFETY: no preconditions.
        ts_ns: unsafe { bpf_ktime_get_ns() },
        nr: c.nr,
        args: c.args,
        ret,
        ip: 0,
        sp: 0,
        bp: 0,
        fds,
        tid,
        len: 0,
    };
    let sent = if kind == call::ACQUIRE {
        let (ip, sp, bp) = user_frame::<HELPER>(&CONFIG.load());
        acquire(head, ip, sp, bp)
    } else {
        release(head)
    };
    count_sent(sent);
    0
}

/// Counts an event sent, or dropped.
#[inline(always)]
fn count_sent(sent: bool) {
    if let Some(st) = stats() {
        // SAFETY: this CPU's value, valid for the program's run.
        unsafe {
            if sent {
                (*st).sent += 1;
            } else {
                (*st).dropped += 1;
            }
        }
    }
}

/// Sends a release: it needs no stack, so a small record (bursts of
/// closes or frees do not fill the buffer). Whether the buffer took it.
#[inline(always)]
fn release(head: LeakEvent) -> bool {
    match LEAK_EVENTS.reserve::<LeakEvent>(0) {
        Some(mut slot) => {
            slot.write(head);
            slot.submit(BPF_RB_NO_WAKEUP);
            true
        }
        None => false,
    }
}

/// Sends an acquisition with a copy of the user stack from `sp`, whose
/// frame is `ip`, `sp`, `bp`. Whether the buffer took it.
#[inline(always)]
fn acquire(head: LeakEvent, ip: u64, sp: u64, bp: u64) -> bool {
    let Some(mut slot) = LEAK_EVENTS.reserve::<LeakAcquire>(0) else {
        return false;
    };
    let rec = slot.as_mut_ptr();
    // SAFETY: `rec` is the reserved record, ours until submitted; the
    // stack copy's sizes fit in `bytes`, and the helper checks the user
    // address.
    unsafe {
        (*rec).ev = head;
        (*rec).ev.ip = ip;
        (*rec).ev.sp = sp;
        (*rec).ev.bp = bp;
        let dst = (&raw mut (*rec).bytes).cast::<core::ffi::c_void>();
        let src = sp as *const core::ffi::c_void;
        // Stacks near their top end are shorter than the copy: smaller
        // sizes are tried in turn.
        (*rec).ev.len = if sp == 0 {
            0
        } else if probe_read_user_raw(dst, LEAK_STACK as u32, src) == 0 {
            LEAK_STACK as u32
        } else if probe_read_user_raw(dst, 4096, src) == 0 {
            4096
        } else if probe_read_user_raw(dst, 2048, src) == 0 {
            2048
        } else if probe_read_user_raw(dst, 1024, src) == 0 {
            1024
        } else if probe_read_user_raw(dst, 256, src) == 0 {
            256
        } else {
            0
        };
    }
    slot.submit(BPF_RB_NO_WAKEUP);
    true
}

/// Entry of an allocator function: a `free` is sent at once (before the
/// block can be handed out again); an allocation's arguments are kept for
/// its return.
#[uprobe]
pub fn heap_entry(ctx: ProbeContext) -> u32 {
    let Some(tid) = target_tid() else {
        return 0;
    };
    // SAFETY: for a uprobe the context is the user register frame.
    let (ip, sp, args) = unsafe {
        let r = &*ctx.regs;
        (r.rip, r.rsp, [r.rdi, r.rsi, r.rdx])
    };
    // SAFETY: the value is copied out at once.
    let Some(func) = (unsafe { HEAP_FNS.get(ip) }).copied() else {
        return 0;
    };
    let st = stats();
    if let Some(st) = st {
        // SAFETY: this CPU's value.
        unsafe { (*st).heap_calls += 1 };
    }
    if HEAP_ON.get(0).copied() != Some(1) {
        return 0;
    }
    if func == heap::FREE {
        if args[0] != 0 {
            count_sent(release(heap_event(tid, heap::FREE, args, 0)));
        }
        return 0;
    }
    let c = HeapCall {
        func,
        _pad: 0,
        sp,
        args,
    };
    if HEAP_IN_FLIGHT.insert(tid, c, 0).is_err()
        && let Some(st) = st
    {
        // SAFETY: this CPU's value.
        unsafe { (*st).heap_full += 1 };
    }
    0
}

/// Return of an allocating function: the block, with the caller's stack
/// (the registers at the return are the caller's, right after its call).
#[uretprobe]
pub fn heap_return(ctx: RetProbeContext) -> u32 {
    let Some(tid) = target_tid() else {
        return 0;
    };
    // SAFETY: a map value pointer stays valid for the program's run.
    let Some(c) = HEAP_IN_FLIGHT.get_ptr(tid).map(|p| unsafe { *p }) else {
        return 0;
    };
    let _ = HEAP_IN_FLIGHT.remove(tid);
    // SAFETY: for a uretprobe the context is the user register frame.
    let (ip, sp, bp, rax) = unsafe {
        let r = &*ctx.regs;
        (r.rip, r.rsp, r.rbp, r.rax)
    };
    // `ret` pops the return address: not this call's entry (a nested
    // call of the same thread took its place).
    if c.sp.wrapping_add(8) != sp {
        if let Some(st) = stats() {
            // SAFETY: this CPU's value.
            unsafe { (*st).heap_unmatched += 1 };
        }
        return 0;
    }
    let block = if c.func == heap::POSIX_MEMALIGN {
        if rax as u32 != 0 {
            return 0;
        }
        // SAFETY: a fault-tolerant read of the target's memory.
        unsafe { bpf_probe_read_user(c.args[0] as *const u64) }.unwrap_or(0)
    } else {
        rax
    };
    if block == 0 {
        // glibc's realloc(p, 0) frees p and returns NULL.
        if c.func == heap::REALLOC && c.args[0] != 0 && c.args[1] == 0 {
            count_sent(release(heap_event(tid, heap::FREE, c.args, 0)));
        }
        return 0;
    }
    count_sent(acquire(heap_event(tid, c.func, c.args, block), ip, sp, bp));
    0
}

/// A heap event's head.
#[inline(always)]
fn heap_event(tid: u32, func: u32, args: [u64; 3], block: u64) -> LeakEvent {
    LeakEvent {
        // SAFETY: no preconditions.
        ts_ns: unsafe { bpf_ktime_get_ns() },
        nr: heap::BASE + func as u64,
        args: [args[0], args[1], args[2], 0, 0, 0],
        ret: block as i64,
        ip: 0,
        sp: 0,
        bp: 0,
        fds: [-1, -1],
        tid,
        len: 0,
    }
}
