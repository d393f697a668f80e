//! `rip-probe leaks`: raw_syscalls' sys_enter and sys_exit filtered to the
//! target, sending each traced call that succeeded, with a copy of the
//! user stack for acquisitions (see `rip_ebpf::leaks`).
//!
//! Two builds of the exit program, as for the other register-reading
//! programs: one with `bpf_task_pt_regs` (5.15 on), one reading the
//! register frame at the top of the kernel stack.

use aya_ebpf::{
    Global,
    helpers::{
        bpf_get_current_pid_tgid, bpf_ktime_get_ns, bpf_probe_read_user,
        generated::bpf_probe_read_user as probe_read_user_raw,
    },
    macros::{map, tracepoint},
    maps::{Array, HashMap, PerCpuArray, RingBuf},
    programs::TracePointContext,
};
use rip_ebpf::leaks::{LEAK_STACK, LeakAcquire, LeakCall, LeakConfig, LeakEvent, LeakStats, call};

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
        acquire::<HELPER>(head)
    } else {
        // A release needs no stack: a small record, so bursts of closes
        // do not fill the buffer.
        match LEAK_EVENTS.reserve::<LeakEvent>(0) {
            Some(mut slot) => {
                slot.write(head);
                slot.submit(BPF_RB_NO_WAKEUP);
                true
            }
            None => false,
        }
    };
    if !sent {
        if let Some(st) = st {
            // SAFETY: this CPU's value.
            unsafe { (*st).dropped += 1 };
        }
        return 0;
    }
    if let Some(st) = st {
        // SAFETY: this CPU's value.
        unsafe { (*st).sent += 1 };
    }
    0
}

/// Sends an acquisition with a copy of the user stack. Whether the buffer
/// took it.
#[inline(always)]
fn acquire<const HELPER: bool>(head: LeakEvent) -> bool {
    let Some(mut slot) = LEAK_EVENTS.reserve::<LeakAcquire>(0) else {
        return false;
    };
    let rec = slot.as_mut_ptr();
    let (ip, sp, bp) = user_frame::<HELPER>(&CONFIG.load());
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
