//! `rip-probe calls`: an entry uprobe and a return uprobe on each probed
//! function, counting every call and timing it in per-CPU maps.
//!
//! Entry times are kept per (thread, depth of probed calls), so recursion
//! and nested probed functions are timed right. A return is matched to the
//! innermost entry of its thread by the stack pointer: `ret` leaves it 8
//! bytes above where it was at entry. A return that does not match (its
//! entry happened before the entry probe was attached) is not timed, and
//! does not disturb the entries of the calls around it.
//!
//! A thread's entries go when it exits (`sched_process_exit`), in flight
//! or not: a program whose threads come and go would otherwise fill the
//! tables with the dead, and every call after that would go untimed.

use aya_ebpf::{
    helpers::{
        bpf_get_current_pid_tgid, bpf_ktime_get_ns,
        generated::bpf_probe_read_user as probe_read_user_raw,
    },
    macros::{map, tracepoint, uprobe, uretprobe},
    maps::{Array, HashMap, PerCpuArray, RingBuf},
    programs::{ProbeContext, RetProbeContext, TracePointContext},
};
use rip_ebpf::calls::{
    BUCKETS, CallEntry, CallKey, CallOutlier, CallStats, MAX_DEPTH, MAX_FUNCTIONS, OUTLIER_STACK,
    bucket,
};

/// Preallocated hash maps (see `programs::PREALLOC`).
const PREALLOC: u32 = 0;

/// `BPF_RB_NO_WAKEUP`: user space drains the outliers on a timer.
const BPF_RB_NO_WAKEUP: u64 = 1;

/// Function id by runtime address (what the entry probe's `ip` is).
#[map]
static CALL_IDS: HashMap<u64, u32> = HashMap::with_max_entries(MAX_FUNCTIONS, PREALLOC);

/// Counts and latencies per function id, per CPU.
#[map]
static CALL_STATS: PerCpuArray<CallStats> = PerCpuArray::with_max_entries(MAX_FUNCTIONS, 0);

/// Outlier threshold per function id, ns; 0: none.
#[map]
static CALL_THRESHOLDS: Array<u64> = Array::with_max_entries(MAX_FUNCTIONS, 0);

/// Calls in flight. Small here because every loader of the object creates
/// it; `rip-probe calls` sizes it to the target's threads.
#[map]
static CALL_ENTRIES: HashMap<CallKey, CallEntry> = HashMap::with_max_entries(256, PREALLOC);

/// Probed calls each thread is in (absent: none). Sized like
/// `CALL_ENTRIES`.
#[map]
static CALL_DEPTH: HashMap<u32, u32> = HashMap::with_max_entries(256, PREALLOC);

/// Calls slower than their function's threshold.
#[map]
static CALL_OUTLIERS: RingBuf = RingBuf::with_byte_size(1 << 21, 0);

/// Copies the user stack from `sp` up into `dst` ([`OUTLIER_STACK`]
/// bytes): all of it, or less where the stack ends sooner. The bytes
/// copied.
///
/// # Safety
/// `dst` must be writable for [`OUTLIER_STACK`] bytes.
#[inline(always)]
unsafe fn copy_stack(dst: *mut core::ffi::c_void, sp: u64) -> u32 {
    let src = sp as *const core::ffi::c_void;
    // SAFETY: the caller's contract; the helper checks `src`.
    unsafe {
        if probe_read_user_raw(dst, OUTLIER_STACK as u32, src) == 0 {
            OUTLIER_STACK as u32
        } else if probe_read_user_raw(dst, 4096, src) == 0 {
            4096
        } else if probe_read_user_raw(dst, 1024, src) == 0 {
            1024
        } else if probe_read_user_raw(dst, 256, src) == 0 {
            256
        } else {
            0
        }
    }
}

/// Entry of a probed function: count it, and note when and where from.
#[uprobe]
pub fn calls_entry(ctx: ProbeContext) -> u32 {
    // SAFETY: for a uprobe the context is the user register frame.
    let (ip, sp) = unsafe { ((*ctx.regs).rip, (*ctx.regs).rsp) };
    // SAFETY: the value is copied out at once.
    let Some(fn_id) = (unsafe { CALL_IDS.get(ip) }).copied() else {
        return 0;
    };
    let Some(stats) = CALL_STATS.get_ptr_mut(fn_id) else {
        return 0;
    };
    // SAFETY: a map value pointer stays valid for the program's run; the
    // value is this CPU's.
    unsafe { (*stats).calls += 1 };
    let tid = bpf_get_current_pid_tgid() as u32;
    let depth_ptr = CALL_DEPTH.get_ptr_mut(tid);
    // SAFETY: as above.
    let depth = depth_ptr.map_or(0, |d| unsafe { *d });
    if depth >= MAX_DEPTH {
        // SAFETY: as above.
        unsafe { (*stats).untimed += 1 };
        return 0;
    }
    // SAFETY: no preconditions.
    let ts_ns = unsafe { bpf_ktime_get_ns() };
    let entry = CallEntry {
        ts_ns,
        sp,
        fn_id,
        _pad: 0,
    };
    let key = CallKey { tid, depth };
    let pushed = CALL_ENTRIES.insert(key, entry, 0).is_ok()
        && match depth_ptr {
            // SAFETY: as above.
            Some(d) => unsafe {
                *d = depth + 1;
                true
            },
            None => CALL_DEPTH.insert(tid, 1u32, 0).is_ok(),
        };
    if !pushed {
        let _ = CALL_ENTRIES.remove(key);
        // SAFETY: as above.
        unsafe { (*stats).untimed += 1 };
    }
    0
}

/// Return of a probed function: time the innermost call of the thread.
#[uretprobe]
pub fn calls_return(ctx: RetProbeContext) -> u32 {
    // SAFETY: no preconditions.
    let now = unsafe { bpf_ktime_get_ns() };
    // SAFETY: for a uretprobe the context is the user register frame.
    let sp = unsafe { (*ctx.regs).rsp };
    let tid = bpf_get_current_pid_tgid() as u32;
    let Some(depth_ptr) = CALL_DEPTH.get_ptr_mut(tid) else {
        return 0;
    };
    // SAFETY: a map value pointer stays valid for the program's run.
    let depth = unsafe { *depth_ptr };
    if depth == 0 {
        return 0;
    }
    let key = CallKey {
        tid,
        depth: depth - 1,
    };
    // SAFETY: the value is copied out at once.
    let Some(entry) = (unsafe { CALL_ENTRIES.get(key) }).copied() else {
        return 0;
    };
    if entry.sp.wrapping_add(8) != sp {
        return 0;
    }
    // The thread's entry stays (at 0) for its next call: no insert and
    // delete per outermost call.
    // SAFETY: as above.
    unsafe { *depth_ptr = depth - 1 };
    let _ = CALL_ENTRIES.remove(key);
    let Some(stats) = CALL_STATS.get_ptr_mut(entry.fn_id) else {
        return 0;
    };
    let ns = now.saturating_sub(entry.ts_ns);
    // SAFETY: this CPU's value, valid for the program's run.
    unsafe {
        let s = &mut *stats;
        s.returned += 1;
        s.sum_ns += ns;
        // The map starts zeroed: the first call sets the minimum.
        if s.returned == 1 || ns < s.min_ns {
            s.min_ns = ns;
        }
        if ns > s.max_ns {
            s.max_ns = ns;
        }
        // The mask shows the verifier the index is in bounds.
        s.buckets[bucket(ns) & (BUCKETS - 1)] += 1;
    }
    let threshold = CALL_THRESHOLDS.get(entry.fn_id).copied().unwrap_or(0);
    if threshold != 0 && ns >= threshold {
        // SAFETY: for a uretprobe the context is the user register frame.
        let bp = unsafe { (*ctx.regs).rbp };
        let sent = match CALL_OUTLIERS.reserve::<CallOutlier>(0) {
            Some(mut slot) => {
                let o = slot.as_mut_ptr();
                // SAFETY: `o` is the reserved record, written field by
                // field (8 KiB do not fit on the BPF stack); the stack is
                // copied by a helper that checks the user address.
                unsafe {
                    (*o).start_ns = entry.ts_ns;
                    (*o).duration_ns = ns;
                    // The kernel has put the return address back in the
                    // instruction pointer before running return probes.
                    (*o).ret_addr = (*ctx.regs).rip;
                    (*o).tid = tid;
                    (*o).fn_id = entry.fn_id;
                    (*o).sp = sp;
                    (*o).bp = bp;
                    (*o)._pad = 0;
                    (*o).stack_len = copy_stack((&raw mut (*o).stack).cast(), sp);
                }
                slot.submit(BPF_RB_NO_WAKEUP);
                true
            }
            None => false,
        };
        // SAFETY: as above.
        unsafe {
            if sent {
                (*stats).outliers += 1;
            } else {
                (*stats).outliers_dropped += 1;
            }
        }
    }
    0
}

/// A thread exits: its calls in flight, which will never return, and its
/// depth entry are removed. Runs for every exiting thread of the system;
/// only those that made probed calls have an entry.
#[tracepoint(category = "sched", name = "sched_process_exit")]
pub fn calls_thread_exit(_ctx: TracePointContext) -> u32 {
    let tid = bpf_get_current_pid_tgid() as u32;
    // SAFETY: the value is copied out at once.
    let Some(depth) = (unsafe { CALL_DEPTH.get(tid) }).copied() else {
        return 0;
    };
    for d in 0..MAX_DEPTH {
        if d >= depth {
            break;
        }
        let _ = CALL_ENTRIES.remove(CallKey { tid, depth: d });
    }
    let _ = CALL_DEPTH.remove(tid);
    0
}
